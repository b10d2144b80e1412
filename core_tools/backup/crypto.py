"""age encryption of a backup stream (pyrage): for public keys only, so the bot never holds a private key.

pyrage encrypts from a readable stream into a writable one; the archive is written by a producer thread into
a pipe the encrypter reads, so nothing is held whole in memory (a backup may be gigabytes). Decryption is
the mirror image: the decrypter writes into a pipe a consumer thread reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import pyrage
from pyrage import ssh, x25519

from core_tools.backup.manifest import BackupError

PIPE_BUFFER = 1 << 20
F_SETPIPE_SZ = 1031  # Linux: a pipe of 1 MB instead of 64 KB, 16 times fewer switches between the threads


def _pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_fd, F_SETPIPE_SZ, PIPE_BUFFER)
    return read_fd, write_fd


Recipient = Any  # a pyrage recipient (x25519 or ssh)
Identity = Any  # a pyrage identity


def _lines(text: str) -> list[str]:
    out = []
    for line in text.replace(",", "\n").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def recipient_strings(value: str) -> list[str]:
    """The public keys of BACKUP_AGE_RECIPIENTS: the keys themselves (comma- or line-separated), or the
    path of a file of them (one a line, # comments); each checked."""
    value = value.strip()
    if not value:
        return []
    if not value.startswith(("age1", "ssh-")):
        path = Path(value).expanduser()
        try:
            value = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BackupError(f"the recipients file {path} cannot be read ({exc.strerror or exc})") from None
    keys = _lines(value)
    if not keys:
        raise BackupError("no age public key found (they start with age1, or ssh- for SSH keys)")
    for key in keys:
        parse_recipient(key)
    return keys


def parse_recipient(key: str) -> Recipient:
    """One public key as a pyrage recipient; BackupError when it is not one."""
    try:
        if key.startswith("ssh-"):
            return ssh.Recipient.from_str(key)
        return x25519.Recipient.from_str(key)
    except Exception:
        shown = key if len(key) <= 24 else key[:20] + "..."
        raise BackupError(f"{shown!r} is not an age public key (age1...) or SSH public key") from None


def load_identities(path: Path) -> list[Identity]:
    """The age identities (AGE-SECRET-KEY-1... lines) of a key file, as `age-keygen` writes it."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except OSError as exc:
        raise BackupError(f"the identity file {path} cannot be read ({exc.strerror or exc})") from None
    identities = []
    for line in _lines(text.replace(",", " ")):
        if line.startswith("AGE-SECRET-KEY-"):
            try:
                identities.append(x25519.Identity.from_str(line))
            except Exception:
                raise BackupError(f"the identity file {path} holds a key that is not valid") from None
    if not identities:
        raise BackupError(f"the identity file {path} holds no age identity (a line AGE-SECRET-KEY-1...)")
    return identities


def new_identity() -> tuple[str, str]:
    """A fresh age key pair as (secret key, public key) text."""
    identity = x25519.Identity.generate()
    return str(identity), str(identity.to_public())


def identity_from(secret: str) -> Identity:
    """An age identity from its secret key text."""
    return x25519.Identity.from_str(secret)


def encrypt_stream(
    produce: Callable[[IO[bytes]], None], sink: io.RawIOBase, recipients: Sequence[str]
) -> None:
    """Run `produce` on a stream whose bytes go, encrypted for `recipients`, into `sink`."""
    keys = [parse_recipient(k) for k in recipients]
    read_fd, write_fd = _pipe()
    failure: list[BaseException] = []

    def producer() -> None:
        try:
            with open(write_fd, "wb", buffering=PIPE_BUFFER) as out:
                produce(out)
        except BaseException as exc:  # handed to the caller below
            failure.append(exc)

    thread = threading.Thread(target=producer, name="backup-archive", daemon=True)
    thread.start()
    reader = open(read_fd, "rb", buffering=PIPE_BUFFER)  # noqa: SIM115  # closed below, before the join
    try:
        pyrage.encrypt_io(reader, sink, keys)  # type: ignore[arg-type]  # any binary stream works
    finally:
        reader.close()  # a producer still writing gets EPIPE instead of blocking forever
        thread.join()
    if failure and not isinstance(failure[0], BrokenPipeError):
        raise failure[0]


def decrypt_stream(
    source: io.RawIOBase, consume: Callable[[IO[bytes]], None], identities: Sequence[Identity]
) -> None:
    """Decrypt `source` with `identities` into a stream that `consume` reads (in this thread)."""
    read_fd, write_fd = _pipe()
    failure: list[BaseException] = []

    def decrypter() -> None:
        try:
            with open(write_fd, "wb", buffering=PIPE_BUFFER) as out:
                pyrage.decrypt_io(source, out, list(identities))  # type: ignore[arg-type]
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=decrypter, name="backup-decrypt", daemon=True)
    thread.start()
    consumed: BaseException | None = None
    with open(read_fd, "rb", buffering=PIPE_BUFFER) as reader:
        try:
            consume(reader)
        except BaseException as exc:
            consumed = exc
    thread.join()
    if failure and not isinstance(failure[0], BrokenPipeError):
        err = failure[0]
        if isinstance(err, pyrage.DecryptError) and "no matching keys" in str(err).lower():
            raise BackupError(
                "the identity given cannot decrypt this backup: it was encrypted for other keys"
            )
        raise BackupError(f"the backup cannot be decrypted ({err})")
    if consumed is not None:
        raise consumed
