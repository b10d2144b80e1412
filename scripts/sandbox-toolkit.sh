#!/usr/bin/env bash
# Installs the sandbox's data toolkit (sandbox/requirements.txt) into its own environment, separate from the
# bot's: a venv of the system python3 (the interpreter the sandbox runs) at $1, default
# /opt/assistant-sandbox. The executor binds it read-only into each sandbox when it exists
# (CODE_PYTHON_ENV). Idempotent: an environment whose requirements stamp matches is left as it is.
set -euo pipefail
target="${1:-${CODE_PYTHON_ENV:-/opt/assistant-sandbox}}"
here="$(cd "$(dirname "$0")/.." && pwd)"
req="$here/sandbox/requirements.txt"
# The interpreter the sandbox runs (core_tools/sandbox/isolation.py looks in the same order).
python="${SANDBOX_SYSTEM_PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in /usr/bin/python3 /usr/local/bin/python3; do
    if [ -x "$candidate" ]; then python="$candidate"; break; fi
  done
fi
stamp="$target/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$target/bin/python3" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "sandbox toolkit: up to date at $target"
  exit 0
fi
rm -rf "$target.new"
uv venv --quiet --python "$python" --no-project "$target.new"
uv pip install --quiet --python "$target.new/bin/python3" -r "$req"
# Byte-compile now: the sandbox mounts it read-only, so Python could not cache bytecode at run time.
"$target.new/bin/python3" -m compileall -q "$target.new/lib" >/dev/null || true
# matplotlib's font list, built once here; the sandbox binds it into each run's cache directory.
mkdir -p "$target.new/mpl-cache"
MPLCONFIGDIR="$target.new/mpl-cache" MPLBACKEND=Agg "$target.new/bin/python3" -c "import matplotlib.pyplot" 2>/dev/null
find "$target.new/mpl-cache" -mindepth 1 ! -name '*.json' -exec rm -rf {} +
# It names font files by absolute path: make them point where the environment will be.
sed -i "s#$target.new/#$target/#g" "$target.new"/mpl-cache/*.json
echo "$want" > "$target.new/.requirements.sha256"
chmod -R a+rX "$target.new"
rm -rf "$target"
mv "$target.new" "$target"
echo "sandbox toolkit: installed at $target"
