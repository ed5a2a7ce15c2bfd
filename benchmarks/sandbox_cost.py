"""What the sandbox around a check graded for credit costs (tinyloop/exercises/sandbox.py).

    python -m benchmarks.sandbox_cost                 7 rounds
    python -m benchmarks.sandbox_cost --repeat 3      a quicker look
    python -m benchmarks.sandbox_cost --reference     maintainers: the book's benchmarks/results/sandbox_cost.*

Two measurements, each interleaved round by round so that a machine's
changing load falls on every variant alike, reported as median, min and max
of the wall-clock seconds:

  * one check of ``run-once``'s reference solution (its own tests, the wider
    suites, the four loop properties), as ``grade`` runs it: ``python -m
    tinyloop.exercises.grading run-once FILE`` plain (the student's way, the
    test ids as the test process reports them), ``--for-credit`` (the ids
    collected first, without the file: ``grade --unsandboxed``) and
    ``--sandboxed`` (``grade``);
  * the sandbox's own start-up: ``python -c pass`` plain and in a sandbox.

A check that does not pass is reported with its first failing step (a
loaded machine can make a server miss its start-up time) and not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import output
from benchmarks.harness.machine import fingerprint
from tinyloop.exercises import catalog, markers, sandbox

EXERCISE = "run-once"
MODES = {"plain": [], "for-credit": ["--for-credit"], "sandboxed": ["--sandboxed"]}


def one_check(path: Path, flags: list[str]) -> tuple[float, str | None]:
    """Seconds for one check of ``path``, and None, or the first failing step if it did not pass."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tinyloop.exercises.grading", EXERCISE, str(path), *flags],
                          capture_output=True, text=True, cwd=path.parent, timeout=900)
    took = time.monotonic() - started
    if done.returncode == 0:
        return took, None
    try:
        steps = json.loads(done.stdout)["steps"]
        return took, next(s["text"] for s in steps if s["status"] == "FAIL")
    except (ValueError, KeyError, StopIteration):
        return took, (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def start_up() -> tuple[float, float]:
    """Seconds for ``python -c pass``, plain and in a sandbox."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    plain = time.monotonic() - started
    started = time.monotonic()
    proc = sandbox.popen([sys.executable, "-c", "pass"])
    if proc.wait() != 0:
        raise SystemExit("sandbox_cost: python -c pass failed in the sandbox")
    return plain, time.monotonic() - started


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)} if values else {"n": 0}


def render(data: dict) -> str:
    lines = [f"one check of {EXERCISE}'s reference, wall-clock seconds (median of the passing runs):"]
    for mode, figures in data["checks"].items():
        if figures["n"]:
            lines.append(f"  {mode:<11} {figures['median']:6.1f} s  (min {figures['min']:.1f}, "
                         f"max {figures['max']:.1f}, {figures['n']} runs)")
        else:
            lines.append(f"  {mode:<11} no passing run")
    plain, boxed = data["start_up"]["plain"], data["start_up"]["sandboxed"]
    lines.append(f"python -c pass: {plain['median'] * 1000:.0f} ms plain, {boxed['median'] * 1000:.0f} ms "
                 f"in a sandbox (median of {plain['n']})")
    for failure in data["failures"]:
        lines.append(f"not counted: a {failure['mode']} run failed: {failure['step']}")
    load = data["load_average"]
    lines.append(f"{data['machine'].get('cpu_model', '?')}, {os.cpu_count()} CPUs; load average "
                 f"{load[0]:.1f} before, {load[1]:.1f} after; {data['date']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sandbox_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="rounds (default 7)")
    output.add_arguments(parser, "sandbox_cost.json")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "sandbox_cost.json")
    if (why := sandbox.available()) is not None:
        raise SystemExit(f"sandbox_cost: no sandbox here: {why}")
    before = os.getloadavg()[0]
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    failures = []
    starts: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="tinyloop-sandbox-cost-") as tmp:
        path = Path(tmp) / f"{EXERCISE}.py"
        path.write_text(markers.reference(catalog.get(EXERCISE), path.name))
        for round_ in range(args.repeat):
            for mode, flags in MODES.items():
                took, failed = one_check(path, flags)
                print(f"round {round_ + 1}: {mode:<11} {took:5.1f} s {failed or ''}", flush=True)
                if failed:
                    failures.append({"mode": mode, "step": failed})
                else:
                    times[mode].append(took)
            starts += [start_up() for _ in range(3)]
    data = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(["python -m benchmarks.sandbox_cost",
                                                                               *(argv or sys.argv[1:])]),
            "machine": fingerprint(), "load_average": [before, os.getloadavg()[0]],
            "settings": {"repeat": args.repeat, "exercise": EXERCISE, "limits": vars(sandbox.LIMITS)},
            "checks": {mode: summary(values) for mode, values in times.items()},
            "start_up": {"plain": summary([p for p, _ in starts]), "sandboxed": summary([s for _, s in starts])},
            "failures": failures}
    output.write_json(data, out)
    text = render(data)
    output.write_text(text, out.with_suffix(".txt"))
    print(text, end="")
    print(f"wrote {output.relative(out)} and {output.relative(out.with_suffix('.txt'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
