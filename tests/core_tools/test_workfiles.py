"""Reading out/ back from a run's tar: what fits is kept, the rest is named with the reason."""

from __future__ import annotations

import io
import tarfile

from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.workfiles import collect_tar


def tar_of(files: dict[str, bytes]) -> bytes:
    """A tar holding `files`, in order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_stream_cut_at_the_cap_keeps_its_whole_files_and_says_where_it_stopped() -> None:
    data = tar_of({"a.txt": b"a" * 3000, "b.txt": b"b" * 3000, "c.txt": b"c" * 3000})
    head = data[:9000]  # the reader's cap fell inside c.txt (its data runs from 7,680 to 10,680)
    kept, skipped = collect_tar(head, FileLimits(10, 10_000), cut=True)
    assert [(f.name, len(f.data)) for f in kept] == [("a.txt", 3000), ("b.txt", 3000)]
    assert len(skipped) == 1 and "the files after b.txt were not looked at" in skipped[0]


def test_each_limit_is_named_and_what_fits_after_it_still_comes() -> None:
    data = tar_of(
        {"big.bin": b"x" * 5000, "one.txt": b"1", "two.txt": b"2", "three.txt": b"3", "last.txt": b"4"}
    )
    kept, skipped = collect_tar(data, FileLimits(2, 4096), total=4096)
    assert [f.name for f in kept] == ["one.txt", "two.txt"]
    assert skipped == (
        "big.bin (5 KB): over the limit of 4 KB per file",
        "three.txt (1 bytes): over the limit of 2 files",
        "last.txt (1 bytes): over the limit of 2 files",
    )
    kept, skipped = collect_tar(
        tar_of({"a": b"a" * 3000, "b": b"b" * 3000, "c": b"c"}), FileLimits(5, 4096), total=4096
    )
    assert [f.name for f in kept] == ["a", "c"]
    assert skipped == ("b (3 KB): over the limit of 4 KB for all files together",)
