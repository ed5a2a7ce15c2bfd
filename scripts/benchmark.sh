#!/usr/bin/env bash
# scripts/benchmark.sh — the main job: set up (scripts/setup.sh), then run every
# stage's server and every installed peer under ab and wrk, print the table
# (each row with its spread), and write benchmarks/results/local/latest.json
# and its plot (ignored by git).  Maintainers refresh the book's committed
# reference results on purpose with `--reference`.
# Extra arguments go to benchmarks/run.py (`--help` lists them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
exec "$TINYLOOP_PYTHON" benchmarks/run.py "$@"
