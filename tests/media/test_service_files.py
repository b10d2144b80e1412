"""in/ and out/ through the sandbox service (the Docker deployment): files travel as base64 in its JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from core_tools.sandbox.client import ServiceExecutor
from core_tools.sandbox.model import FileLimits
from tests.deploy.test_service import Service
from tests.support.media_files import PNG_SIGNATURE

pytestmark = pytest.mark.slow  # a sandbox service process with the data toolkit


async def test_files_in_and_out_through_the_service(tmp_path: Path, sandbox_toolkit: str) -> None:
    sock = tmp_path / "run" / "sandbox.sock"
    service = Service(sock, "--timeout", "30", "--python-env", sandbox_toolkit).start()
    try:
        executor = ServiceExecutor(str(sock))
        code = (
            "import matplotlib.pyplot as plt\n"
            "rows = open('in/data.csv').read().split()[1:]\n"
            "plt.plot([int(r.split(',')[1]) for r in rows])\n"
            "plt.savefig('out/line.png')\nprint(len(rows))"
        )
        result = await executor.run(
            code, files_in={"data.csv": b"x,y\n1,4\n2,9\n"}, files_out=FileLimits(2, 5_000_000)
        )
        assert result.success, result.stderr
        assert result.stdout == "2\n"
        (chart,) = result.files_out
        assert chart.name == "line.png" and chart.data.startswith(PNG_SIGNATURE)
    finally:
        service.stop()
