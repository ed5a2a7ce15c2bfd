#!/usr/bin/env bash
# scripts/mutation.sh — measure the exercise checker by mutation: set up
# (scripts/setup.sh), then run scripts/mutation.py at low priority (one
# mutant at a time, each a full `python -m tinyloop check`), which writes
# benchmarks/results/mutation.json, the table of the book's teachers' page.
# Extra arguments go to scripts/mutation.py (`--help` lists them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
exec nice -n 15 "$TINYLOOP_PYTHON" scripts/mutation.py "$@"
