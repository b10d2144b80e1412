#!/usr/bin/env bash
# Installs the sandbox's data toolkit (sandbox/requirements.txt) into its own environment, separate from the
# bot's: a venv of the interpreter the sandbox runs, at $1 (default $CODE_PYTHON_ENV, else
# /opt/assistant-sandbox). The bot runs this itself at its first start (core_tools/sandbox/toolkit.py), into
# data/sandbox-python by default; the Docker image runs it at build time. The executor binds the environment
# read-only into each sandbox at /opt/sandbox-python (CODE_PYTHON_ENV, wherever it is on the host).
# Idempotent: an environment whose requirements stamp matches is left as it is. Locked: a second install of
# the same target waits for the first and then finds it up to date. Verified: every package is imported
# before the stamp is written.
set -euo pipefail
target="${1:-${CODE_PYTHON_ENV:-/opt/assistant-sandbox}}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/sandbox/requirements.txt"
# `uv run` tells its children where uv is ($UV); otherwise it must be on PATH.
uv="${UV:-uv}"
if ! command -v "$uv" >/dev/null 2>&1; then
  echo "sandbox toolkit: uv not found: install it (pip install uv) or put it on PATH" >&2
  exit 1
fi
# The interpreter the sandbox runs (core_tools/sandbox/isolation.py looks in the same order; the bot passes
# the one it found).
python="${SANDBOX_SYSTEM_PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in /usr/bin/python3 /usr/local/bin/python3; do
    if [ -x "$candidate" ]; then python="$candidate"; break; fi
  done
fi
if [ -z "$python" ]; then
  echo "sandbox toolkit: no python3 in /usr/bin or /usr/local/bin: set SANDBOX_SYSTEM_PYTHON" >&2
  exit 1
fi
stamp="$target/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
current() { [ -x "$target/bin/python3" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; }
if current; then
  echo "sandbox toolkit: up to date at $target"
  exit 0
fi
# It replaces the target whole: never a directory that holds something else.
if [ -e "$target" ] && [ ! -f "$target/pyvenv.cfg" ] && [ -n "$(ls -A "$target" 2>/dev/null)" ]; then
  echo "sandbox toolkit: $target exists and is not a Python environment (it would be replaced): choose an empty or new directory" >&2
  exit 1
fi
mkdir -p "$(dirname "$target")"
# One install at a time per target (two bot processes starting together, or the bot and this script by
# hand); the lock is released when this process ends, however it ends.
exec 9>"$target.lock"
flock 9
if current; then
  echo "sandbox toolkit: up to date at $target (installed meanwhile)"
  exit 0
fi
rm -rf "$target.new"
"$uv" venv --quiet --python "$python" --no-project "$target.new"
"$uv" pip install --quiet --python "$target.new/bin/python3" -r "$req"
# Every requirement must import (its name as a module) before the environment counts as installed.
modules="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' -e 's/[=<>!~;[].*//' -e 's/-/_/g' "$req" | paste -sd, -)"
"$target.new/bin/python3" -I -c "import $modules" || {
  echo "sandbox toolkit: the installed packages do not import ($modules)" >&2
  exit 1
}
# Byte-compile now: the sandbox mounts it read-only, so Python could not cache bytecode at run time.
"$target.new/bin/python3" -m compileall -q "$target.new/lib" >/dev/null || true
# matplotlib's font list, built once here; the sandbox binds it into each run's cache directory.
mkdir -p "$target.new/mpl-cache"
MPLCONFIGDIR="$target.new/mpl-cache" MPLBACKEND=Agg "$target.new/bin/python3" -c "import matplotlib.pyplot" 2>/dev/null
find "$target.new/mpl-cache" -mindepth 1 ! -name '*.json' -exec rm -rf {} +
# It names font files by absolute path: make them point where every code run sees the environment
# (TOOLKIT_MOUNT in core_tools/sandbox/isolation.py), wherever it is on the host.
sed -i "s#$target.new/#/opt/sandbox-python/#g" "$target.new"/mpl-cache/*.json
echo "$want" > "$target.new/.requirements.sha256"
chmod -R a+rX "$target.new"
rm -rf "$target"
mv "$target.new" "$target"
echo "sandbox toolkit: installed at $target"
