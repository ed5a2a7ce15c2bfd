# scripts/check_time.py
"""How long a student waits for `python -m tinyloop check NAME FILE`.

    python -m scripts.check_time                        every exercise, 3 runs each
    python -m scripts.check_time --exercises transport-write,uv-write-batch --runs 5

For each exercise, two files a student hands in, each checked ``--runs``
times as the student's own command (a subprocess, wall-clock time):

  * ``wrong``: the reference with our first mutant that the checker fails
    (tinyloop/exercises/mutants.py): the time to the first FAILED, what a
    student waits for between edits;
  * ``reference``: the reference solution: the time to PASSED, every
    suite and loop property included.

A Cython exercise's build is cached by content (tinyloop/exercises/build.py):
the first run of each file compiles and is reported apart
(``first_with_build``).  Targets: a median of at most 10 s for a Python
exercise, 20 s for a Cython one.

It measures the checker, not a loop, so it lives beside scripts/mutation.py;
as a module from the repository's root, it keeps the benchmarks' output rule
(benchmarks/results/local/check_time.json; ``--reference`` the committed
one), summary and machine fingerprint.  ``--update`` keeps the file's other
exercises, so a long series can run in parts, each under
``flock /tmp/tinyloop-bench.lock`` (the machine may be shared: each exercise
keeps its date and the load averages when it started and ended).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.harness import machine, output, summary
from tinyloop.exercises import catalog, markers, mutants

TARGET = {"python": 10.0, "cython": 20.0}  # seconds, median
TIMEOUT = 600.0


def timed_check(name: str, path: Path) -> tuple[float, bool, list[str]]:
    """Run the student's command on ``path``: (seconds, passed, the first FAIL line and the 3 after it)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tinyloop", "check", name, str(path)],
                          cwd=path.parent, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    lines = done.stdout.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("FAIL ")]
    return time.monotonic() - started, done.returncode == 0, lines[failed[0]:failed[0] + 4] if failed else []


def wrong_solution(exercise: Any, text: str, filename: str) -> tuple[str, str] | None:
    """A mutant of ours the checker is expected to fail, as (description, text); None if none."""
    found = mutants.mutants(exercise.name, text, filename)
    # The condition made True first: the reported kind of mistake.
    found.sort(key=lambda m: (m.operator != "condition-true", m.line))
    return (f"line {found[0].line}: {found[0].original} -> {found[0].code}", found[0].text) if found else None


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(exercise: Any, runs: int) -> dict[str, Any]:
    """Check the exercise's reference and wrong files ``runs`` times each; its entry of the JSON."""
    filename = Path(markers.default_file(exercise)).name
    reference = markers.reference(exercise, filename)
    files = {"reference": ("the reference", reference)}
    if wrong := wrong_solution(exercise, reference, filename):
        files["wrong"] = wrong
    entry: dict[str, Any] = {"chapter": exercise.chapter, "kind": "cython" if exercise.extension else "python",
                             "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "load_before": _load()}
    with tempfile.TemporaryDirectory(prefix=f"check-time-{exercise.name}-") as tmp:
        for label, (what, text) in files.items():
            path = Path(tmp) / label / filename
            path.parent.mkdir()
            path.write_text(text, encoding="utf-8")
            checks = [timed_check(exercise.name, path) for _ in range(runs + (1 if exercise.extension else 0))]
            seconds = [round(took, 2) for took, _, _ in checks]
            verdicts = ["PASSED" if passed else "FAILED" for _, passed, _ in checks]
            first = seconds.pop(0) if exercise.extension else None
            entry[label] = {"file": what, "seconds": seconds, "verdicts": verdicts,
                            "failures": [shown for _, _, shown in checks],
                            "first_with_build": first, **(summary.summarize(seconds) or {})}
            print(f"  {exercise.name} {label}: median {entry[label]['median']:.1f} s {sorted(set(verdicts))}"
                  + (f" (first, compiling: {first:.1f} s)" if first else ""), flush=True)
    entry["load_after"] = _load()
    return entry


def main(argv: list[str] | None = None) -> int:
    """Measure the exercises ``argv`` names and write the JSON; 0, or 2 (argparse) for a wrong argument."""
    parser = argparse.ArgumentParser(prog="python -m scripts.check_time", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exercises", help="comma list (default: every exercise)")
    parser.add_argument("--runs", type=int, default=3, help="checks of each file (default 3)")
    parser.add_argument("--update", action="store_true",
                        help="keep the other exercises already in the output file")
    output.add_arguments(parser, "check_time.json")
    args = parser.parse_args(argv)
    path = output.json_path(parser, args, "check_time.json")
    known = {e.name: e for e in catalog.exercises()}
    names = args.exercises.split(",") if args.exercises else list(known)
    if unknown := [n for n in names if n not in known]:
        parser.error(f"unknown exercise {', '.join(unknown)}")
    data = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "python -m scripts.check_time " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": machine.fingerprint(), "targets_seconds": TARGET, "runs": args.runs, "exercises": {}}
    if args.update and path.exists():
        before = json.loads(path.read_text(encoding="utf-8"))
        data["exercises"] = {n: e for n, e in before["exercises"].items() if n not in names}
        data["commands"] = [*before.get("commands", [before["command"]]), data["command"]]
    for name in names:
        data["exercises"][name] = measure(known[name], args.runs)
        data["exercises"] = {n: data["exercises"][n] for n in known if n in data["exercises"]}  # book order
        output.write_json(data, path)  # after each exercise: an interrupted run keeps what it measured
    for label in ("wrong", "reference"):
        for kind, target in TARGET.items():
            medians = [e[label]["median"] for e in data["exercises"].values() if e["kind"] == kind and label in e]
            if medians:
                print(f"{label:<9} {kind:<6}: medians {min(medians):.1f}-{max(medians):.1f} s over "
                      f"{len(medians)} exercises; target {target:g} s: "
                      f"{'met' if max(medians) <= target else 'NOT met'}")
    print(f"wrote {output.relative(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
