"""`python -m core_tools.backup take|drill`: the worker process (core_tools/backup/worker.py); reads its job
as JSON on stdin, writes progress to stderr and its result as one JSON line on stdout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from core_tools.backup.crypto import identity_from
from core_tools.backup.manifest import BackupError
from core_tools.backup.restore import drill
from core_tools.backup.store import clean_old_drills
from core_tools.backup.take import BackupConfig, take_backup
from core_tools.backup.worker import lower_priority


def main(argv: list[str]) -> int:
    """Run one job; exit 1 with its reason as the last line of stderr when it fails."""
    lower_priority()
    action = argv[0] if argv else ""
    payload = json.loads(sys.stdin.read() or "{}")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if action == "take":
            path, manifest = take_backup(BackupConfig.from_dict(payload["config"]), say)
            result = {
                "manifest": str(path),
                "name": manifest.name,
                "size": manifest.size,
                "parts": len(manifest.parts),
            }
        elif action == "drill":
            identities = [identity_from(s) for s in payload.get("identities", [])]
            if payload.get("backup_dir"):
                clean_old_drills(Path(payload["backup_dir"]))  # what drills of earlier versions left there
            outcome = drill(Path(payload["manifest"]), identities, Path(payload["work"]))
            result = {"name": outcome.name, "ok": outcome.ok, "problem": outcome.problem}
        else:
            raise BackupError(f"unknown action {action!r}")
    except BackupError as exc:
        say(str(exc))
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
