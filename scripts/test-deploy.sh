#!/usr/bin/env bash
# The Docker deploy test (tests/deploy/test_compose_up.py): builds the image, runs deploy/docker-compose.yml
# for real with tests/deploy/compose.test.yml, drives a code turn end to end, restarts, and removes it all.
# Needs a running Docker engine with Compose v2 and the base images the Dockerfile names (local or pullable).
# Takes a few minutes; not part of ./scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
uv sync --frozen --quiet
DEPLOY_TEST=1 exec uv run --frozen pytest tests/deploy/test_compose_up.py -v "$@"
