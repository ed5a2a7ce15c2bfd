"""How fast ``python -m tinyloop grade`` grades a class, one check at a time and in parallel.

    python -m benchmarks.grading                     30 students x 6 exercises, --jobs 1 then --jobs 2
    python -m benchmarks.grading --quick             4 students x 2 exercises: a look, not a measurement
    python -m benchmarks.grading --students 40 --jobs 1,2,4 --timeout 30

A generated class: ``--students`` students, each handing in the same
``EXERCISES``; what each file is follows a fixed pattern over (student,
exercise), the same in every run:

  * ``correct`` (3 in 10): the reference solution; its check runs every
    step, the wider suites and the loop properties;
  * ``wrong`` (about 5 in 10): the reference with our first mutant
    (tinyloop/exercises/mutants.py, a condition made ``True``), which the
    exercise's own tests fail;
  * ``starter`` (1 in 10): the untouched starter, which fails before any test;
  * ``hanging`` (1 in 60): the reference with an endless loop at import,
    which costs the whole ``--timeout``.

Each file carries its student's name in a comment, so no two are the same
bytes.  Per ``--jobs`` value, the class is graded from nothing (``--force``,
into a folder of its own) as a teacher types it, and timed by the wall clock:
``checks_per_minute`` is the checks run over that time.  Every run must give
the same ``grades.csv`` (the row order and verdicts do not depend on
``--jobs``); a run whose CSV differs, or any verdict unlike its file's kind,
is flagged.  Repetitions (``--repeat``) interleave the ``--jobs`` values.
The grading runs sandboxed where ``tinyloop.exercises.sandbox`` can build
its sandbox, as for credit; ``sandboxed`` in the JSON says which.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import experiment, output
from benchmarks.harness.render import align, describe_machine
from tinyloop.exercises import catalog, grading, markers, mutants

EXERCISES = ["timer-heap", "run-once", "trampoline-return", "trampoline-throw", "task-step", "task-cancel"]
QUICK_EXERCISES = ["trampoline-return", "task-cancel"]
KINDS = ("correct", "wrong", "starter", "hanging")
EXPECTED = {"correct": "passed", "wrong": "failed", "starter": "failed", "hanging": "timeout"}
CLASS_AT_SCALE = (200, 25)  # students x exercises: the class the teachers' page estimates


def kind(index: int) -> str:
    """What the ``index``-th file of the class is (student-major order): the pattern above."""
    if index % 60 == 7:
        return "hanging"
    return {0: "correct", 3: "correct", 6: "correct", 9: "starter"}.get(index % 10, "wrong")


def wrong_solution(name: str) -> str:
    """The reference of exercise ``name`` with our first mutant (a condition made True first)."""
    exercise = catalog.get(name)
    found = mutants.mutants(name, markers.reference(exercise), markers.default_file(exercise))
    if not found:
        raise SystemExit(f"grading: exercise {name} has no mutant to hand in as a wrong solution")
    found.sort(key=lambda m: (m.operator != "condition-true", m.line))
    return found[0].text


def hanging_solution(name: str) -> str:
    """The reference of ``name``, which never finishes importing: an endless loop at its top."""
    text = markers.reference(catalog.get(name))
    at = text.index("from __future__ import annotations\n") + len("from __future__ import annotations\n")
    return text[:at] + "while True:\n    pass\n" + text[at:]


def write_class(folder: Path, students: int, names: list[str]) -> dict[tuple[str, str], str]:
    """Write the class into ``folder`` (``folder/sNN/EXERCISE.py``); returns each file's kind."""
    texts = {name: {"correct": markers.reference(catalog.get(name)), "wrong": wrong_solution(name),
                    "starter": markers.starter(catalog.get(name)), "hanging": hanging_solution(name)}
             for name in names}
    kinds = {}
    for number in range(students):
        student = f"s{number + 1:02d}"
        (folder / student).mkdir(parents=True, exist_ok=True)
        for offset, name in enumerate(names):
            what = kind(number * len(names) + offset)
            kinds[student, name] = what
            (folder / student / markers.default_file(catalog.get(name))).write_text(
                f"# {student}'s {name}\n" + texts[name][what])
    return kinds


def grade_once(folder: Path, out: Path, names: list[str], jobs: int, timeout: float,
               unsandboxed: bool, kinds: dict[tuple[str, str], str]) -> dict:
    """Grade the class from nothing with ``--jobs jobs``: the record of one run."""
    command = [sys.executable, "-m", "tinyloop", "grade", str(folder), "--exercises", ",".join(names),
               "--jobs", str(jobs), "--timeout", f"{timeout:g}", "--out", str(out), "--force",
               *(["--unsandboxed"] if unsandboxed else [])]
    started = time.monotonic()
    # grade's own progress lines (one per check, with its ETA) are passed on as they come: a long
    # run shows how far it is.
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(f"  --jobs {jobs}: {line.rstrip()[:160]}", flush=True)
        error = proc.stderr.read() if proc.stderr is not None else ""
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # grade stops its running checks on the way out
            proc.wait()
    seconds = time.monotonic() - started
    record: dict = {"jobs": jobs, "seconds": round(seconds, 1), "checks": len(kinds)}
    if proc.returncode != 0:
        return {**record, "status": "failed", "note": (error.strip().splitlines() or ["?"])[-1]}
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    unexpected = [f"{r['student']}/{r['exercise']}: {r['status']} ({kinds[r['student'], r['exercise']]})"
                  for r in rows if r["status"] != EXPECTED[kinds[r["student"], r["exercise"]]]]
    return {**record, "status": "ok", "checks_per_minute": round(len(rows) / seconds * 60, 2),
            "passed": sum(r["status"] == "passed" for r in rows), "unexpected": unexpected,
            "csv": (out / "grades.csv").read_text()}


def conclusion(data: dict) -> str:
    rows = {row["jobs"]: row for row in data["rows"]}
    parts = [f"--jobs {jobs}: {row['checks_per_minute']:.1f} checks/min" for jobs, row in rows.items()
             if row.get("checks_per_minute")]
    best = max((row for row in rows.values() if row.get("checks_per_minute")),
               key=lambda row: row["checks_per_minute"], default=None)
    if 1 in rows and best and best["jobs"] != 1 and rows[1].get("checks_per_minute"):
        parts.append(f"{best['checks_per_minute'] / rows[1]['checks_per_minute']:.2f}x with --jobs {best['jobs']}")
    if best:
        students, exercises = CLASS_AT_SCALE
        hours = students * exercises / best["checks_per_minute"] / 60
        parts.append(f"{students} x {exercises} at that rate: {hours:.1f} h")
    return experiment.sentence(f"grading {data['settings']['students']} students x "
                               f"{len(data['settings']['exercises'])} exercises", parts)


def render(data: dict) -> str:
    s = data["settings"]
    header = ["--jobs", "checks", "wall time", "checks/min", "vs --jobs 1", "passed", "unexpected"]
    base = next((row.get("checks_per_minute") for row in data["rows"] if row["jobs"] == 1), None)
    rows = []
    for row in data["rows"]:
        rate = row.get("checks_per_minute")
        rows.append([str(row["jobs"]), str(row["checks"]), f"{row['seconds']:.0f} s",
                     f"{rate:.1f}" if rate else row["status"],
                     f"{rate / base:.2f}x" if rate and base else "",
                     str(row.get("passed", "")), str(len(row.get("unexpected", [])))])
    mix = ", ".join(f"{n} {k}" for k, n in data["mix"].items())
    lines = [f"grade a generated class: {s['students']} students x {len(s['exercises'])} exercises "
             f"({mix}); --timeout {s['timeout']:g} s; "
             f"{'sandboxed' if data['sandboxed'] else 'unsandboxed: ' + str(data['sandbox_missing'])}", "",
             *("  " + line for line in align(header, rows)), "",
             f"  same grades.csv in every run: {'yes' if data['same_csv'] else 'NO'}",
             f"  {describe_machine(data)}"]
    for row in data["rows"]:
        lines += [f"  unexpected with --jobs {row['jobs']}: {u}" for u in row.get("unexpected", [])[:5]]
    if data.get("not_measured"):
        lines.append(f"  interrupted: {', '.join(data['not_measured'])} not measured")
    lines += ["", f"  {conclusion(data)}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("grading", __doc__, repeat=1, pin=False)
    parser.add_argument("--students", type=int, help="students in the class (default 30; --quick 4)")
    parser.add_argument("--exercises", help=f"comma list (default {','.join(EXERCISES)}; "
                                            f"--quick {','.join(QUICK_EXERCISES)})")
    parser.add_argument("--jobs", default="1,2", help="comma list of --jobs values to compare (default 1,2)")
    parser.add_argument("--timeout", type=float, help="grade's limit per check, in seconds: what a hanging "
                                                      "file costs (default 60; --quick 30)")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "grading.json")
    pick = experiment.settings(parser, args, {"students": 30, "timeout": 60.0, "repeat": 1},
                               {"students": 4, "timeout": 30.0})
    names = args.exercises.split(",") if args.exercises else QUICK_EXERCISES if args.quick else EXERCISES
    unknown = sorted(set(names) - {e.name for e in catalog.exercises()})
    if unknown:
        parser.error(f"--exercises: no exercise {', '.join(unknown)}")
    try:
        jobs = [int(j) for j in args.jobs.split(",")]
    except ValueError:
        parser.error(f"--jobs: a comma list of whole numbers, got {args.jobs!r}")
    missing = grading.sandbox_missing()
    clock = experiment.Clock()
    records = []
    left: list[str] = []  # the runs an interruption (Ctrl-C, SIGTERM) left out
    with tempfile.TemporaryDirectory(prefix="tinyloop-grading-bench-") as tmp:
        folder = Path(tmp) / "class"
        kinds = write_class(folder, pick["students"], names)
        runs = [(rep, count) for rep in range(1, pick["repeat"] + 1) for count in jobs]
        try:
            for rep, count in runs:
                record = grade_once(folder, Path(tmp) / f"out-{count}-{rep}", names, count, pick["timeout"],
                                    missing is not None, kinds)
                records.append({"rep": rep, **record})
                print(f"rep {rep} --jobs {count}: {record.get('checks_per_minute', record['status'])} checks/min "
                      f"({record['seconds']:.0f} s, load {os.getloadavg()[0]:.1f})", flush=True)
        except KeyboardInterrupt:
            left = [f"rep {rep} --jobs {count}" for rep, count in runs[len(records):]]
            print(f"interrupted: {', '.join(left)} not measured", flush=True)
            if not records:
                return 130
    folded = experiment.fold(records, "checks", "jobs", ["checks_per_minute", "seconds"],
                             deciding=["checks_per_minute"])
    rows = []
    for count, summary in next(iter(folded.values())).items():
        own = [r for r in records if str(r["jobs"]) == count]
        rows.append({"jobs": int(count), "checks": own[0]["checks"], "seconds": summary["seconds"],
                     "checks_per_minute": summary["checks_per_minute"], "spread": summary["spread"],
                     "noisy": summary["noisy"], "status": summary["status"], "note": summary["note"],
                     "passed": own[0].get("passed"),
                     "unexpected": sorted({u for r in own for u in r.get("unexpected", [])})})
    csvs = {r["csv"] for r in records if r.get("csv")}
    mix = {k: sum(1 for v in kinds.values() if v == k) for k in KINDS}
    data = experiment.document("grading", argv, clock, settings={**pick, "quick": args.quick, "exercises": names,
                                                                 "jobs": jobs},
                               rows=rows, mix=mix, sandboxed=missing is None, sandbox_missing=missing,
                               same_csv=len(csvs) == 1, cores=len(os.sched_getaffinity(0)), not_measured=left)
    return experiment.conclude(data, out, clock, render, conclusion)


if __name__ == "__main__":
    sys.exit(main())
