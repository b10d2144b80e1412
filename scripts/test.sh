#!/usr/bin/env bash
# The whole test suite: lint, format, types, package layering, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
uv sync --frozen --quiet
echo "== ruff (lint)";        uv run --frozen ruff check .
echo "== ruff (format)";      uv run --frozen ruff format --check .
echo "== mypy (types)";       uv run --frozen mypy
echo "== import-linter (layering: bot -> core_tools -> db)"; uv run --frozen lint-imports
echo "== pytest";             uv run --frozen pytest "$@"
