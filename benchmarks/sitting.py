# benchmarks/sitting.py
"""Every Part's reference run in one sitting: the book's measured files, one after another.

    python -m benchmarks.sitting --list                 the steps, in order, with each one's command
    python -m benchmarks.sitting --reference            run them all and write benchmarks/results/sitting.json
    python -m benchmarks.sitting --reference --from tornado     resume at a step (a failed one, say)
    python -m benchmarks.sitting --table                the log as benchmarks/README.md's table

A chapter quotes only its Part's committed results (benchmarks/README.md, "The reference runs,
Part by Part").  Numbers taken at different times on a shared 2-core machine disagree by more
than the effects they measure, so the book takes them in one sitting: each experiment alone,
one after another, nothing else running.  Each step is the experiment's own ``--reference``
command, unchanged; this module only orders them and keeps the log a reader needs to trust the
sitting: for each step its command, start and end (UTC), wall seconds, exit status and the load
average before and after (``os.getloadavg``, the 1-minute figure; see proc(5), /proc/loadavg).

The timing experiments come first, Part by Part; the counting ones (callgrind, which reads
instructions and is not disturbed by other work) come last.  ``limits`` measures the servers as
they were before the chapter's remedy too: it gets a ``git worktree`` of :data:`LIMITS_BEFORE`,
removed afterwards, so the checkout is left as it was.

Exit status: 0 when every step exited 0, else 1 (the log still lists every step).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["LIMITS_BEFORE", "STEPS", "Step", "main", "shown", "table"]

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "sitting.json"

# The commit before chapters/readiness.md's "At the descriptor limit" remedy.
LIMITS_BEFORE = "ae7d320"
BEFORE = "{before}"     # stands for the worktree's path in a step's argv

LOOPS = ["--stages", "aio,aio-streams,uv,uv-streams,ring",
         "--peers", "asyncio-protocol,asyncio-streams,uvloop-protocol,uvloop-streams,"
                    "rloop-protocol,rloop-streams,c-epoll,c-uring"]
ANY = ["--cpus-load", "any", "--cpus-proxy", "any", "--cpus-app", "any", "--cpus-db", "any"]


@dataclass(frozen=True)
class Step:
    """One experiment: ``name`` (unique), the committed ``files`` it writes under
    benchmarks/results/, the ``parts`` of the book that read them, ``argv`` after ``python``, and
    whether it ``counts`` (instructions or system calls: not a timing)."""
    name: str
    files: str
    parts: str
    argv: tuple[str, ...]
    counts: bool = False


def _step(name: str, files: str, parts: str, *argv: str, counts: bool = False) -> Step:
    return Step(name, files, parts, ("-m", *argv), counts)


STEPS: tuple[Step, ...] = (
    _step("run", "latest.json, latest.png", "0, I, II, III, IV", "benchmarks.run", "--reference"),
    _step("idle", "idle.json", "I", "benchmarks.idle", "--reference"),
    _step("limits", "limits.json", "I", "benchmarks.limits", "--before", BEFORE, "--reference"),
    _step("fairness", "fairness.json", "0, II", "benchmarks.fairness", "--reference", "--repeat", "5"),
    _step("stack_cost", "stack_cost.json", "II", "benchmarks.stack_cost", "--reference"),
    _step("fairness-profile", "profile.txt", "II", "benchmarks.fairness", "--profile", "callbacks,coroutines",
          "--reference"),
    _step("stack_cost-profile", "profile_generators.txt", "II", "benchmarks.stack_cost", "--profile", "--reference"),
    _step("echo", "echo.json", "III, IV", "benchmarks.echo", "--reference", "--repeat", "3"),
    _step("micro", "micro.json", "III, IV", "benchmarks.micro", "--reference"),
    _step("aio_changes", "aio_changes.json", "III", "benchmarks.aio_changes", "--reference"),
    _step("aio_changes-profile", "profile_aio.txt", "III", "benchmarks.aio_changes", "--profile", "--reference"),
    _step("uv_changes", "uv_changes.json", "IV", "benchmarks.uv_changes", "--reference"),
    _step("uv_changes-profile", "profile_uv.txt", "IV", "benchmarks.uv_changes", "--profile", "--reference"),
    _step("memory", "memory.json", "IV", "benchmarks.memory", "--reference"),
    _step("loops", "loops.json", "IV, VI", "benchmarks.run", "--reference", "--name", "loops", "--no-plot",
          *LOOPS, "--repeat", "3"),
    _step("loops_pipeline", "loops_pipeline.json", "IV, VI", "benchmarks.run", "--reference", "--name", "loops_pipeline",
          "--no-plot", *LOOPS, "--loads", "wrk-pipeline", "--repeat", "2"),
    _step("pipeline", "pipeline.json", "V.1", "benchmarks.run", "--loads", "wrk-pipeline", "--name", "pipeline",
          "--no-plot", "--reference"),
    # The pipelining chapter includes the pipelined table as Markdown: a rendering, not a run.
    _step("pipeline-report", "pipeline.md", "V.1", "benchmarks.report", "benchmarks/results/pipeline.json",
          "--loads", "wrk-pipeline", "--markdown", "benchmarks/results/pipeline.md"),
    _step("tornado", "tornado.json", "V.2", "benchmarks.realworld.tornado_bench", "--reference"),
    _step("notfaster", "notfaster.json", "V.3", "benchmarks.realworld.notfaster_bench", "--reference"),
    _step("notfaster-unpinned", "notfaster.json", "V.3", "benchmarks.realworld.notfaster_bench", "--reference", *ANY),
    _step("workers", "workers.json", "V.4", "benchmarks.workers", "--reference"),
    _step("completion", "completion.json", "VI", "benchmarks.completion", "--reference"),
    _step("race", "race.json, race.md", "VI", "benchmarks.race", "--reference"),
    # Counts, not times: last, so nothing they run can disturb a timing.
    _step("uv_changes-syscalls", "uv_changes_syscalls.txt", "IV", "benchmarks.uv_changes", "--syscalls", "--reference",
          counts=True),
    _step("syscalls", "syscalls.json", "V.1", "benchmarks.syscalls", "--reference", counts=True),
    _step("trace_cost", "trace_cost.json", "IV", "benchmarks.trace_cost", "--reference", "--repeat", "2", counts=True),
    _step("instructions", "instructions.json", "IV", "benchmarks.instructions", "--reference", counts=True),
    _step("instructions-requests", "instructions_requests.json", "IV, VI", "benchmarks.instructions",
          "--requests", "all", "--reference", counts=True),
)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def shown(step: Step) -> str:
    """The step's command as the README shows it (the worktree as /tmp/before, as limits' help has it)."""
    return "python " + shlex.join(step.argv).replace(shlex.quote(BEFORE), "/tmp/before")


def _run(step: Step, python: str, before: Path | None) -> dict:
    argv = [python, *(str(before) if arg == BEFORE else arg for arg in step.argv)]
    print(f"\n=== {step.name} (Part {step.parts}): {shown(step)}", flush=True)
    record = {"name": step.name, "parts": step.parts, "command": shown(step), "counts": step.counts,
              "start": _now(), "load_start": _load()}
    began = time.monotonic()
    returncode = subprocess.call(argv, cwd=ROOT)
    record.update(end=_now(), load_end=_load(), seconds=round(time.monotonic() - began, 1),
                  returncode=returncode)
    print(f"=== {step.name}: exit {returncode} in {record['seconds']:.0f} s, load "
          f"{record['load_start']} -> {record['load_end']}", flush=True)
    return record


def _worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(path), LIMITS_BEFORE],
                   cwd=ROOT, check=True)


def _drop_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)


def table(log: dict) -> str:
    """The log as benchmarks/README.md's Markdown table: a row per step, in the sitting's order."""
    rows = ["| Part | step | files | start (UTC) | seconds | command | load average |",
            "|---|---|---|---|--:|---|---|"]
    for record in log["steps"]:
        step = next(step for step in STEPS if step.name == record["name"])
        files = ", ".join(f"`{name}`" for name in step.files.split(", "))
        kind = " (counts, not times)" if step.counts else ""
        rows.append(f"| {step.parts} | {step.name} | {files} | {record['start'][:16].replace('T', ' ')} "
                    f"| {record['seconds']:.0f} | `{shown(step)}` "
                    f"| {record['load_start']} → {record['load_end']}{kind} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sitting",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the steps and exit")
    parser.add_argument("--reference", action="store_true",
                        help="maintainers: run every step with --reference and write "
                             "benchmarks/results/sitting.json")
    parser.add_argument("--from", dest="start", metavar="STEP",
                        help="start at this step; the log keeps the earlier steps' records")
    parser.add_argument("--only", metavar="STEPS", help="comma list of steps to run")
    parser.add_argument("--table", action="store_true",
                        help="print the committed log as benchmarks/README.md's table and exit")
    args = parser.parse_args(argv)

    names = [step.name for step in STEPS]
    if args.list:
        for step in STEPS:
            kind = "counts" if step.counts else "times"
            print(f"{step.name:22} Part {step.parts:18} {kind:7} {shown(step)}")
        return 0
    if args.table:
        if not OUT.exists():
            parser.error(f"{OUT.relative_to(ROOT)} is not there yet: run --reference first")
        print(table(json.loads(OUT.read_text())))
        return 0
    if not args.reference:
        parser.error("a sitting writes the book's reference files: pass --reference (or --list)")
    chosen = STEPS
    if args.start:
        if args.start not in names:
            parser.error(f"--from {args.start}: no such step; steps: {', '.join(names)}")
        chosen = STEPS[names.index(args.start):]
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"--only: no step {', '.join(unknown)}; steps: {', '.join(names)}")
        chosen = tuple(step for step in chosen if step.name in wanted)

    log = {"schema": 1, "commit": _git("rev-parse", "--short", "HEAD"), "started": _now(),
           "steps": []}
    if (args.start or args.only) and OUT.exists():
        previous = json.loads(OUT.read_text())
        rerun = {step.name for step in chosen}
        log["started"] = previous.get("started", log["started"])
        log["steps"] = [record for record in previous.get("steps", []) if record["name"] not in rerun]
    with tempfile.TemporaryDirectory(prefix="tinyloop-before-") as scratch:
        before = Path(scratch) / "before"
        made = False
        try:
            for step in chosen:
                if BEFORE in step.argv and not made:
                    _worktree(before)
                    made = True
                log["steps"].append(_run(step, sys.executable, before))
                log["steps"].sort(key=lambda record: names.index(record["name"]))
                log["finished"] = _now()
                OUT.write_text(json.dumps(log, indent=1) + "\n")
        finally:
            if made:
                _drop_worktree(before)
    failed = [record["name"] for record in log["steps"] if record["returncode"] != 0]
    timed = [record for record in log["steps"] if not record["counts"]]
    if timed:
        loads = [value for record in timed for value in (record["load_start"], record["load_end"])]
        print(f"\nthe timings' load average (1 min): {min(loads)} to {max(loads)}")
    print("every step exited 0" if not failed else f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
