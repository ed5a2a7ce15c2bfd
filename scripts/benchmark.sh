#!/usr/bin/env bash
# scripts/benchmark.sh — the main job: set up (scripts/setup.sh), then run every
# stage's server and every installed peer under ab and wrk, print the table,
# and write benchmarks/results/latest.json and its plot.
# Extra arguments go to benchmarks/run.py (`--help` lists them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
exec "$TINYLOOP_PYTHON" benchmarks/run.py "$@"
