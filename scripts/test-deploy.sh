#!/usr/bin/env bash
# The Docker deploy tests: build the image and run the shipped compose files for real, driven through the fake
# Bot API and fake LLM on 127.0.0.1, then remove it all.
#   tests/deploy/test_compose_up.py     deploy/docker-compose.yml (+ compose.test.yml): a code turn end to end,
#                                       restart, and the sandbox's health check failing without its seccomp profile
#   tests/deploy/test_compose_scale.py  deploy/docker-compose.scale.yml (+ compose.scale.test.yml): PostgreSQL,
#                                       two replicas behind nginx in webhook mode, every update answered, a
#                                       code turn through a sandbox service on TCP
# Needs a running Docker engine with Compose v2.24+ and the base images deploy/Dockerfile names (local or
# pullable; scripts/local-base-images.sh gets them either way). .ci/run sets all of this up where it can:
# docs/docker-on-test-hosts.md.
# Takes a few minutes; not part of ./scripts/test.sh. Extra arguments go to pytest (e.g. -k scale).
set -euo pipefail
cd "$(dirname "$0")/.."
uv sync --frozen --quiet
DEPLOY_TEST=1 exec uv run --frozen pytest tests/deploy/test_compose_up.py tests/deploy/test_compose_scale.py \
    -v "$@"
