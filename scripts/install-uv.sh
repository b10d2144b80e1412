#!/usr/bin/env bash
# Puts uv on this machine for the current user when it is missing, on any Python 3.11+: `pip install --user`
# where pip allows it, else (a Python whose pip refuses installs outside a venv: Debian 12, Ubuntu 24.04,
# Fedora's "externally-managed-environment") a venv of its own under ~/.local/share/uv-venv, linked
# into ~/.local/bin. Prints the folder to put on PATH. Safe to run again.
set -euo pipefail
bin="$HOME/.local/bin"
if command -v uv >/dev/null 2>&1; then dirname "$(command -v uv)"; exit 0; fi
if [ -x "$bin/uv" ]; then echo "$bin"; exit 0; fi
python=${PYTHON:-python3}
mkdir -p "$bin"
if "$python" -m pip install --quiet --user uv >/dev/null 2>&1 && [ -x "$bin/uv" ]; then
  echo "$bin"; exit 0
fi
# root's pip without --user installs into the interpreter's own bin.
if [ "$(id -u)" = 0 ] && "$python" -m pip install --quiet uv >/dev/null 2>&1; then
  dirname "$("$python" -c 'import shutil, sys; print(shutil.which("uv") or sys.exit(1))')"; exit 0
fi
venv="$HOME/.local/share/uv-venv"
if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
  echo "install-uv: '$python -m venv' failed: install your distribution's venv package (Debian and Ubuntu:" \
    "sudo apt install python3-venv), or pipx (sudo apt install pipx; pipx install uv)" >&2
  exit 1
fi
"$venv/bin/pip" install --quiet uv
ln -sf "$venv/bin/uv" "$bin/uv"
ln -sf "$venv/bin/uvx" "$bin/uvx"
echo "$bin"
