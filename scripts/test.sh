#!/usr/bin/env bash
# scripts/test.sh — the test command: set up (scripts/setup.sh), then run
#   1. the default suite: every test not marked slow (the book's build with
#      warnings as errors is one of them), on 2 pytest-xdist workers;
#   2. the asyncio suites on every other Python the machine has (noxfile.py:
#      the conformance suite and the aio and uv contract tests on each
#      CPython >= 3.11 found on PATH or under pyenv; absent versions are
#      skipped with a message);
#   3. the slow step, when CI=true (CI sets it), TINYLOOP_SLOW=1 or the one
#      argument --slow asks for it: the tests marked slow, the slow versions
#      of what step 1 checks (tornado's own suite on each loop, Part IV's
#      debug and AddressSanitizer builds, the book built in its other
#      editions, each exercise's reference solution run through the checker,
#      the compile-first Cython checks, the benchmarks' quick runs, the
#      per-stage tests on every stage, ...).  A plain run leaves it out and
#      says how to run it, so a student waits minutes, not half an hour; CI
#      runs all three.
# Exits non-zero if any step fails; the steps asked for always all run.  At
# the end it prints one line per step (passed / failed / ran no tests / left
# out, its counts and minutes), then a closing "N passed, N failed" line.
#
# Workers: TINYLOOP_TEST_WORKERS (default 2; 0 runs pytest in one process).
# Tests that must have the machine to themselves are marked alone
# (@pytest.mark.alone) and run after the parallel run, in one process.
#
# Other arguments go to pytest instead, as one run (e.g. `bash scripts/test.sh
# -k epoll`, or `-m slow`); the nox step is then left out unless
# TINYLOOP_NOX=1, and TINYLOOP_NOX=0 leaves it out of a full run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The slow step: CI=true (what CI sets), TINYLOOP_SLOW=1, or --slow alone.
slow=0
if [ "${CI:-}" = true ] || [ "${TINYLOOP_SLOW:-}" = 1 ]; then slow=1; fi
if [ $# -eq 1 ] && [ "$1" = --slow ]; then slow=1; shift; fi

source scripts/setup.sh

workers=${TINYLOOP_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then
    parallel=(-n "$workers" --dist loadgroup)
fi
reports=$(mktemp -d "${TMPDIR:-/tmp}/tinyloop-test.XXXXXX")
trap 'rm -rf "$reports"' EXIT

status=0
summary=()
passed_total=0
failed_total=0

# counts FILE.xml -> "P F S": passed, failed (failures + errors), skipped, from pytest's JUnit XML.
counts() {
    "$TINYLOOP_PYTHON" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("0 0 0")
    raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - failed - skipped, failed, skipped)
EOF
}

# pytest_run NAME PYTEST-ARGS...: one pytest run, its JUnit XML kept as NAME.xml for the counts.
pytest_run() {
    local xml=$reports/$1.xml
    shift
    "$TINYLOOP_PYTHON" -m pytest "$@" --junitxml="$xml" || return $?
}

# step NAME EMPTY_OK MARK-EXPRESSION: the tests the expression selects, the
# ones marked alone left out, on the workers; then those marked alone, in one
# process.  pytest's exit code 5 ("no tests collected") fails the step unless
# EMPTY_OK is 1 (the slow step on a checkout whose slow tests were all
# deselected); either way the summary says "ran no tests", never "passed".
step() {
    local name=$1 empty_ok=$2 expr=$3 started code=0 alone=0 p f s p2 f2 s2
    started=$(date +%s)
    pytest_run "$name" "${parallel[@]}" -m "($expr) and not alone" || code=$?
    pytest_run "$name-alone" -m "($expr) and alone" || alone=$?
    read -r p f s < <(counts "$reports/$name.xml")
    read -r p2 f2 s2 < <(counts "$reports/$name-alone.xml")
    p=$((p + p2)) f=$((f + f2)) s=$((s + s2))
    if [ "$code" = 5 ] && [ "$alone" = 0 ]; then code=0; fi   # only tests marked alone
    case $alone in 0|5) ;; *) case $code in 0|5) code=$alone ;; esac ;; esac
    record "$name" "$empty_ok" "$code" "$p" "$f" "$s" "$started"
}

# record NAME EMPTY_OK CODE PASSED FAILED SKIPPED STARTED: one line of the summary.
record() {
    local word
    passed_total=$((passed_total + $4))
    failed_total=$((failed_total + $5))
    case $3 in
        0) word=passed ;;
        5) word="ran no tests"; [ "$2" = 1 ] || status=1 ;;
        *) word="FAILED (pytest exit $3)"; status=1 ;;
    esac
    summary+=("$(printf '%-8s %-24s %5d passed, %d failed, %d skipped  %s min' \
        "$1" "$word" "$4" "$5" "$6" "$(minutes "$7")")")
}

minutes() { awk -v s="$(( $(date +%s) - $1 ))" 'BEGIN { printf "%.1f", s / 60 }'; }

if [ $# -gt 0 ]; then
    started=$(date +%s) code=0
    pytest_run pytest "${parallel[@]}" "$@" || code=$?
    read -r p f s < <(counts "$reports/pytest.xml")
    record pytest 0 "$code" "$p" "$f" "$s" "$started"
else
    step default 0 "not slow"
fi

if [ "${TINYLOOP_NOX:-}" = 1 ] || { [ $# -eq 0 ] && [ "${TINYLOOP_NOX:-}" != 0 ]; }; then
    started=$(date +%s)
    if "$TINYLOOP_PYTHON" -m nox; then word=passed; else word=FAILED; status=1; fi
    summary+=("$(printf '%-8s %-24s %s  %s min' nox "$word" "(its counts are in nox's output above)" \
        "$(minutes "$started")")")
else
    echo "test.sh: the per-Python nox sessions are skipped (TINYLOOP_NOX=1 runs them)" >&2
fi

if [ $# -eq 0 ] && [ "$slow" = 1 ]; then
    step slow 1 slow
elif [ $# -eq 0 ]; then
    summary+=("$(printf '%-8s %-24s %s' slow "left out" \
        "the tests marked slow: \`bash scripts/test.sh --slow\` runs all three steps, as CI does")")
fi

echo
echo "test.sh: one line per step"
printf '  %s\n' "${summary[@]}"
echo "test.sh: $passed_total passed, $failed_total failed"
exit "$status"
