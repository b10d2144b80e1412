"""scripts/local-base-images.sh builds the base images deploy/Dockerfile names, read from the Dockerfile
itself: what it would build is exactly what a build needs. (Building them takes minutes and root: .ci/run does
it on machines that cannot pull them; docs/docker-on-test-hosts.md.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local-base-images.sh"


def _images_the_dockerfile_needs() -> set[str]:
    """The images the Dockerfile pulls: the ARG default its stages start FROM, and its COPY --from images."""
    text = (REPO / "deploy" / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    stages = set(re.findall(r"^FROM \S+ AS (\w+)$", text, re.MULTILINE))
    needed = set()
    for base in re.findall(r"^FROM (\S+)", text, re.MULTILINE):
        variable = re.fullmatch(r"\$\{(\w+)\}", base)
        needed.add(args[variable.group(1)] if variable else base)
    needed |= {source for source in re.findall(r"--from=(\S+)", text) if source not in stages}
    return needed


def test_the_script_builds_the_images_the_dockerfile_needs() -> None:
    listed = subprocess.run([str(SCRIPT), "--list"], capture_output=True, text=True, timeout=60, check=True)
    needed = _images_the_dockerfile_needs()
    assert needed == {"python:3.11-slim-bookworm", "ghcr.io/astral-sh/uv:0.13.9"}
    assert set(listed.stdout.split()) == needed


def test_an_unknown_option_is_refused_with_the_usage() -> None:
    done = subprocess.run([str(SCRIPT), "--pull-harder"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage:" in done.stderr
