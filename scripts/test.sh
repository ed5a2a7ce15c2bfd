#!/usr/bin/env bash
# scripts/test.sh — the test command: set up (scripts/setup.sh), then run the
# whole suite, the docs build with warnings as errors included, and then the
# asyncio suites on every other Python the machine has (noxfile.py: the
# conformance suite, the aio server tests and tests/test_aio_*.py on each
# CPython >= 3.11 found on PATH or under pyenv; absent versions are skipped
# with a message).  Exits non-zero if either step fails; both always run.
#
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k epoll`); with
# arguments the slower nox step is left out unless TINYLOOP_NOX=1, and
# TINYLOOP_NOX=0 leaves it out of a full run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

status=0
"$TINYLOOP_PYTHON" -m pytest "$@" || status=$?

if [ "${TINYLOOP_NOX:-}" = 1 ] || { [ $# -eq 0 ] && [ "${TINYLOOP_NOX:-}" != 0 ]; }; then
    "$TINYLOOP_PYTHON" -m nox || status=$?
else
    echo "test.sh: the per-Python nox sessions are skipped (TINYLOOP_NOX=1 runs them)" >&2
fi
exit "$status"
