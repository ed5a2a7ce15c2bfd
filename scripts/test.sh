#!/usr/bin/env bash
# scripts/test.sh — the test command: set up (scripts/setup.sh), then run
#   1. the default suite (every test not marked slow; the docs build with
#      warnings as errors is one of them),
#   2. the asyncio suites on every other Python the machine has (noxfile.py:
#      the conformance suite, the aio and uv server tests and
#      tests/test_aio_*.py on each CPython >= 3.11 found on PATH or under
#      pyenv; absent versions are skipped with a message),
#   3. the slow tests (tornado's own suite on each loop, Part IV's debug and
#      AddressSanitizer builds, ...): the slow versions of what step 1 checks.
# Exits non-zero if any step fails; all three always run.
#
# Extra arguments go to pytest instead, as one run (e.g. `bash scripts/test.sh
# -k epoll`, or `-m slow`); the nox step is then left out unless
# TINYLOOP_NOX=1, and TINYLOOP_NOX=0 leaves it out of a full run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

status=0
if [ $# -gt 0 ]; then
    "$TINYLOOP_PYTHON" -m pytest "$@" || status=$?
else
    "$TINYLOOP_PYTHON" -m pytest -m "not slow" || status=$?
fi

if [ "${TINYLOOP_NOX:-}" = 1 ] || { [ $# -eq 0 ] && [ "${TINYLOOP_NOX:-}" != 0 ]; }; then
    "$TINYLOOP_PYTHON" -m nox || status=$?
else
    echo "test.sh: the per-Python nox sessions are skipped (TINYLOOP_NOX=1 runs them)" >&2
fi

if [ $# -eq 0 ]; then
    "$TINYLOOP_PYTHON" -m pytest -m slow || status=$?
fi
exit "$status"
