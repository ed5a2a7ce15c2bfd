#!/usr/bin/env bash
# scripts/benchmark.sh — the main job: set up (scripts/setup.sh), then run every
# stage's server and every installed peer under ab and wrk, print the table
# (each row with its spread), and write benchmarks/results/local/latest.json
# and its plot (ignored by git).  Maintainers refresh the book's committed
# reference results on purpose with `--reference`.
# Extra arguments go to `python -m benchmarks.run` (`--help` lists them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh
install_benchmark_peers
"$TINYLOOP_PYTHON" -m benchmarks.run "$@"

# Part III, after the HTTP table: TCP echo (benchmarks.echo) and the loop
# micro-benchmarks (benchmarks.micro), about five minutes more.  --quick
# --list and --reference carry over.
part3=()
for arg in "$@"; do
    case $arg in
        --quick|--list) part3+=("$arg") ;;
        --reference) part3+=(--reference) ;;
        -h|--help) exit 0 ;;
    esac
done
"$TINYLOOP_PYTHON" -m benchmarks.echo ${part3[@]+"${part3[@]}"}
case " ${part3[*]-} " in *" --list "*) exit 0 ;; esac
"$TINYLOOP_PYTHON" -m benchmarks.micro ${part3[@]+"${part3[@]}"}
