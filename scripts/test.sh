#!/usr/bin/env bash
# scripts/test.sh — the test command: set up (scripts/setup.sh), then run the
# whole suite, the docs build with warnings as errors included.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k epoll`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
exec "$TINYLOOP_PYTHON" -m pytest "$@"
