# benchmarks/syscalls.py
"""System calls per request, on every stage and peer, with and without pipelining.

    python benchmarks/syscalls.py                       every stage and peer, depth 1 and 24
    python benchmarks/syscalls.py --stages all --quick  a smoke run: 1 s per point
    python benchmarks/syscalls.py --stages epoll,aio --peers none --depths 24
    python benchmarks/syscalls.py --render              rewrite the .md table from the saved JSON

For each server and each pipelining depth, a fresh server is started and
warmed up, ``strace -c -f -p PID`` is attached to it, a short wrk load runs
(depth 1: the harness's ``wrk`` load, one request in flight per connection;
depth 24: its ``wrk-pipeline`` load, Japronto's 24 requests per write), and
strace's count of every system call, by name, is divided by the requests
wrk counted.  Writes benchmarks/results/local/syscalls.json and .md (ignored
by git); ``--reference`` writes the book's benchmarks/results/syscalls.json and
syscalls.md instead.  ``benchmarks/run.py --syscalls`` runs this after its
timed passes, on the same servers.
"""

# Rules this file keeps:
#
#   * This is a separate, short pass, never the timed one.  strace stops the
#     server at every system call it makes (ptrace(2)), so a traced server is
#     several times slower: its req/s and CPU time here mean nothing, and
#     nothing here is reported but counts.
#   * Counts, not guesses: the figures are strace's own ``calls`` column and
#     wrk's own request count; a point that could not be measured (strace
#     missing or not permitted, the server did not start, wrk counted
#     nothing) is a row that says why.
#   * Nothing is left behind: strace is stopped with SIGINT (it then detaches
#     and prints its table) and waited for, and every server is stopped in a
#     ``finally``, as in run.py.
#
# Discussion: why strace, and what the figures can be off by.
#   ``perf stat -e 'syscalls:sys_enter_*' -p PID`` counts the same calls far
#   more cheaply (a kernel counter per tracepoint, no stop per call) and works
#   on this machine; but it needs one event per system call name, and many
#   kernels forbid it to non-root users (perf_event_paranoid).  strace runs
#   wherever ptrace does, follows threads born after it attached (-f: the
#   threaded stage starts one per connection), and names every call it saw.
#   Its slowness changes the shape of the work a little: a slowed server
#   finds more connections ready per epoll_wait, so at depth 1 the wait
#   calls per request come out somewhat lower than unobserved; reads and
#   writes per request do not depend on speed.  The denominator is wrk's
#   count of answered requests; the server also answers some that wrk never
#   reads (the batches in flight when wrk stops: at most connections x depth
#   requests), so the figures lean high by at most that many requests over
#   the run's total, which the JSON records as ``in_flight_bound``.

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.harness.machine import ROOT
from benchmarks import loads, servers
from benchmarks.loads import Settings
from benchmarks.harness import output
from benchmarks.harness.machine import display, fingerprint, version_line
from benchmarks.harness.process import choose_names, choose_pinning, warm_up
from tinyloop import stages

__all__ = ["DEPTH_LOADS", "GROUPS", "SCHEMA", "Strace", "main", "markdown", "measure",
           "parse_strace_summary", "strace_problem"]

RESULTS = ROOT / "benchmarks" / "results"
SAVED = RESULTS / "syscalls.json"              # the book's, committed; only --reference writes it
LOCAL = RESULTS / "local" / "syscalls.json"    # a user's run: ignored by git
SCHEMA = 1

# Pipelining depth -> the harness load that sends it (benchmarks/loads.py).
DEPTH_LOADS = {1: "wrk", 24: "wrk-pipeline"}

# Seconds of wrk per point.  Under strace a Python server answers a few
# thousand requests a second at depth 1, so even the quick run counts
# thousands of requests against an in-flight bound of 100.
DURATION = {"full": 3.0, "quick": 1.0}

# The table's columns: each gathers the calls that do one job, by name, so
# that servers using read(2) and servers using recvfrom(2) land together.
GROUPS: dict[str, tuple[str, ...]] = {
    "read": ("read", "readv", "recvfrom", "recvmsg", "recvmmsg"),
    "write": ("write", "writev", "sendto", "sendmsg", "sendmmsg"),
    "wait": ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "kevent"),
    # libuv (uvloop, Node) hands its epoll_ctl changes to the kernel in
    # batches through io_uring (IORING_OP_EPOLL_CTL), one io_uring_enter each.
    "epoll_ctl": ("epoll_ctl", "io_uring_enter"),
    "accept+close": ("accept", "accept4", "close", "shutdown"),
}


# --- strace ----------------------------------------------------------------

def strace_problem() -> str | None:
    """None if ``strace -p`` can attach here, else why not (for a skip note).

    Tries it on a child of our own: strace missing, ptrace forbidden (a
    container without CAP_SYS_PTRACE, or Yama's ptrace_scope) both show up.
    """
    if shutil.which("strace") is None:
        return "strace is not installed (Debian: apt-get install strace)"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             stdin=subprocess.DEVNULL)
    try:
        with tempfile.TemporaryDirectory(prefix="tinyloop-strace-") as tmp:
            try:
                with Strace(child.pid, ["-c"], Path(tmp) / "probe.txt", attach_timeout=5):
                    pass
            except RuntimeError as error:
                return str(error)
    finally:
        child.kill()
        child.wait()
    return None


class Strace:
    """``strace -f -p PID ARGS -o OUT`` around a block: attached on entry, detached on exit.

    ``args`` are strace's own options (``["-c"]`` for the summary table,
    ``["-e", "trace=sendto"]`` to log only some calls); ``out`` receives
    what strace writes.  Entering returns once strace has attached to every
    thread of the process (each thread's ``TracerPid`` in /proc is set), so
    nothing the block makes the server do goes uncounted; it raises
    ``RuntimeError`` with strace's complaint if strace exits or has not
    attached within ``attach_timeout`` seconds.  Leaving sends strace SIGINT,
    on which it detaches and writes its summary, and waits for it (SIGKILL
    after 10 s).  See strace(1) and ptrace(2).
    """

    def __init__(self, pid: int, args: list[str], out: Path, attach_timeout: float = 10.0) -> None:
        self.pid, self.args, self.out, self.attach_timeout = pid, args, out, attach_timeout
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Strace:
        self.proc = subprocess.Popen(["strace", "-f", "-qq", "-p", str(self.pid), *self.args, "-o", str(self.out)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + self.attach_timeout
        while not self._attached():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                complaint = self._stop() or "strace did not attach in time"
                raise RuntimeError(f"strace -p {self.pid}: {complaint}")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _attached(self) -> bool:
        try:
            tasks = os.listdir(f"/proc/{self.pid}/task")
            for tid in tasks:
                with open(f"/proc/{self.pid}/task/{tid}/status") as f:
                    tracer = next((line.split()[1] for line in f if line.startswith("TracerPid:")), "0")
                if tracer == "0":
                    return False
        except OSError:
            return False  # the process (or a thread) went away: not attached
        return True

    def _stop(self) -> str:
        """Detach and wait; returns the last line strace wrote to stderr ('' if none)."""
        proc = self.proc
        if proc is None:
            return ""
        self.proc = None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        lines = [line for line in (err or "").strip().splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


# "% time     seconds  usecs/call     calls    errors syscall" then rows like
# " 41.20    0.012345          12      1000        17 recvfrom" (errors may be blank).
_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$")


def parse_strace_summary(text: str) -> dict[str, int]:
    """strace ``-c``'s table -> ``{syscall name: calls}``, without the ``total`` row."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match and match.group(3) != "total":
            counts[match.group(3)] = counts.get(match.group(3), 0) + int(match.group(1))
    return counts


# --- one point -------------------------------------------------------------

def measure(server: servers.Server, depth: int, settings: Settings, pinning: dict,
            workdir: Path, warmup: int) -> dict:
    """Start ``server``, warm it up, count its system calls under one wrk load of ``depth``.

    Returns the point's JSON record: ``status`` is ``"ok"`` or ``"error"``
    with a ``note``; ``requests`` is wrk's count of answered requests;
    ``calls`` maps each system call's name to strace's count over the load;
    ``per_request`` maps each of GROUPS, ``"other"`` and ``"total"`` to calls
    per request.
    """
    load = loads.get(DEPTH_LOADS[depth])
    record: dict = {"server": server.name, "depth": depth, "load": load.name, "status": "error",
                    "note": None, "requests": None, "seconds": None, "calls": None, "per_request": None,
                    "in_flight_bound": load.concurrency * load.pipeline}
    try:
        process = servers.launch(server, pinning["server_prefix"])
    except RuntimeError as error:
        record["note"] = "did not start: " + " | ".join(str(error).strip().splitlines()[:3])
        return record
    try:
        failure = warm_up(process.address, warmup, settings.socket_timeout)
        if failure is not None:
            record["note"] = failure[1]
            return record
        url = f"http://{process.host}:{process.port}/"
        summary = workdir / f"{server.name}-{depth}.strace"
        try:
            with Strace(process.pid, ["-c"], summary):
                result, _, _ = loads.run(load, url, settings, workdir, pinning["load_prefix"])
        except RuntimeError as error:
            record["note"] = str(error)
            return record
        calls = parse_strace_summary(summary.read_text()) if summary.exists() else {}
        record.update(requests=result.completed, seconds=result.seconds, calls=calls)
        if not result.completed:
            record["note"] = result.error or "wrk counted no answered request"
            return record
        if not calls:
            record["note"] = "strace counted no system call"
            return record
        record["per_request"] = per_request(calls, result.completed)
        record["status"] = "ok"
        if result.failed:
            record["note"] = f"wrk counted {result.failed} failed requests"
        return record
    finally:
        process.stop()


def per_request(calls: dict[str, int], requests: int) -> dict[str, float]:
    """Group ``calls`` by GROUPS (the rest is ``"other"``) and divide each by ``requests``."""
    out: dict[str, float] = {}
    grouped = 0
    for group, names in GROUPS.items():
        n = sum(calls.get(name, 0) for name in names)
        grouped += n
        out[group] = n / requests
    total = sum(calls.values())
    out["other"] = (total - grouped) / requests
    out["total"] = total / requests
    return out


# --- the table ---------------------------------------------------------------

def _figure(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _others(calls: dict[str, int], requests: int, top: int = 3) -> str:
    """The largest calls outside GROUPS, per request: ``"futex 0.51, clock_gettime 0.02"``."""
    grouped = {name for names in GROUPS.values() for name in names}
    rest = sorted(((n, name) for name, n in calls.items() if name not in grouped), reverse=True)[:top]
    return ", ".join(f"{name} {_figure(n / requests)}" for n, name in rest if n) or "—"


def table(data: dict) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: one row per server and depth, in the run's server order."""
    header = ["server", "depth", "requests", *GROUPS, "other", "total", "largest others"]
    rows = []
    for record in data["points"]:
        name, depth = record["server"], str(record["depth"])
        if record["status"] != "ok":
            rows.append([name, depth, "error", *["—"] * (len(header) - 4), record["note"] or "—"])
            continue
        # From the counts, not the stored per_request: --render then follows GROUPS.
        figures = per_request(record["calls"], record["requests"])
        rows.append([name, depth, str(record["requests"]),
                     *[_figure(figures[group]) for group in (*GROUPS, "other", "total")],
                     _others(record["calls"], record["requests"])])
    return header, rows


def markdown(data: dict) -> str:
    """The results as a Markdown page fragment: the table, then how it was made."""
    header, rows = table(data)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i in (0, len(header) - 1) else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    settings = data["settings"]
    notes = [
        "",
        f"System calls per answered request, counted by `strace -c -f -p PID` over a "
        f"{settings['duration_s']:g} s wrk load per row (depth 1: `{data['commands']['1']}`; "
        f"depth 24: `{data['commands']['24']}`).",
        "Columns: " + "; ".join(f"**{group}** = {', '.join(names)}" for group, names in GROUPS.items())
        + "; **other** = every other call (the largest of them in the last column).",
        "Under strace the server runs several times slower, so these rows say how many calls, "
        "never how fast; a slowed server finds more connections ready per wait, so at depth 1 "
        "*wait* reads a little low.",
        f"Measured on: {describe(data)}. Command: `{data['command']}`.",
    ]
    skipped = {name: note for name, note in data.get("skipped", {}).items()}
    if skipped:
        notes.append("Not measured: " + "; ".join(f"{name} ({note})" for name, note in skipped.items()) + ".")
    return "\n".join(lines + notes) + "\n"


def describe(data: dict) -> str:
    machine = data["machine"]
    how = "--quick: a smoke test" if data["settings"]["quick"] else "one run per row"
    return (f"{machine['cpu_model']}, {machine['cpus']} CPUs, {machine['system']} {machine['kernel']}, "
            f"{machine['python']}, {data['tools']['strace']}; {how}; {data['date'][:10]}")


# --- the whole run -------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/syscalls.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", help="comma list, 'all' or 'none' (default all)")
    parser.add_argument("--peers", help="comma list, 'all' or 'none' (default every peer but stall)")
    parser.add_argument("--depths", default="1,24", help="pipelining depths, from 1 and 24 (default both)")
    parser.add_argument("--quick", action="store_true", help=f"{DURATION['quick']:g} s per point instead of "
                                                             f"{DURATION['full']:g}: a smoke test")
    parser.add_argument("--duration", type=float, help="seconds of wrk per point (overrides --quick)")
    output.add_arguments(parser, "syscalls.json")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: recompute the groups from the JSON's counts, rewrite it and its .md")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and wrk to CPUs")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render and args.reference:
        args.out, args.reference = SAVED, False  # recompute the book's file in place
    out = output.json_path(parser, args, "syscalls.json")
    if args.render:
        # The counts stay as measured; what is derived from them (the groups,
        # per request) is recomputed, so a change to GROUPS needs no new run.
        data = json.loads(out.read_text(encoding="utf-8"))
        data["groups"] = GROUPS
        for record in data["points"]:
            if record["status"] == "ok":
                record["per_request"] = per_request(record["calls"], record["requests"])
        out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        out.with_suffix(".md").write_text(markdown(data), encoding="utf-8")
        print(f"wrote {display([str(out.with_suffix('.md'))])}")
        return 0
    try:
        depths = [int(d) for d in args.depths.split(",") if d.strip()]
    except ValueError:
        parser.error(f"--depths: expected a comma list of numbers, got {args.depths!r}")
    unknown = [d for d in depths if d not in DEPTH_LOADS]
    if unknown or not depths:
        parser.error(f"--depths: choose from {', '.join(map(str, DEPTH_LOADS))}")
    problem = strace_problem()
    if problem:
        raise SystemExit(f"syscalls.py: cannot count system calls here: {problem}")
    if shutil.which("wrk") is None:
        raise SystemExit("syscalls.py: wrk is not installed (Debian: apt-get install wrk)")
    every_stage = [stage.name for stage in stages.STAGES]
    stage_names = choose_names(args.stages, every_stage, "stage", every_stage)
    peer_names = choose_names(args.peers, [peer.name for peer in servers.PEERS], "peer",
                        [peer.name for peer in servers.PEERS if peer.default])
    candidates = ([servers.stage_server(stages.get(name)) for name in stage_names]
                  + [servers.peer_server(name) for name in peer_names])
    skipped = {}
    for server in candidates:
        note = servers.prepare(server)
        if note:
            skipped[server.name] = note
            print(f"skip {server.name}: {note}")
    ready = [server for server in candidates if server.name not in skipped]
    duration = args.duration or DURATION["quick" if args.quick else "full"]
    settings = Settings(requests={}, duration=duration, socket_timeout=5.0, run_timeout=60.0)
    warmup = 20 if args.quick else 200
    pinning = choose_pinning(args.no_pin)
    print(f"{len(ready)} servers x {len(depths)} depths, {duration:g} s each under strace; "
          f"about {len(ready) * len(depths) * (duration + 1.5):.0f} s", flush=True)
    date, started = datetime.now(timezone.utc), time.monotonic()
    points = []
    with tempfile.TemporaryDirectory(prefix="tinyloop-syscalls-") as workdir:
        for server in ready:
            for depth in depths:
                record = measure(server, depth, settings, pinning, Path(workdir), warmup)
                points.append(record)
                figures = record["per_request"]
                said = (f"{figures['total']:.2f} calls/req (read {figures['read']:.2f}, "
                        f"write {figures['write']:.2f}, wait {figures['wait']:.2f}) over "
                        f"{record['requests']} requests" if figures else f"ERROR: {record['note']}")
                print(f"{server.name:<18} depth {depth:<3} {said}", flush=True)
    url = "http://127.0.0.1:PORT/"
    data = {
        "schema": SCHEMA,
        "date": date.isoformat(timespec="seconds"),
        "command": display(["python", "benchmarks/syscalls.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": fingerprint(),
        "tools": {"strace": version_line(["strace", "-V"]), "wrk": version_line(["wrk", "-v"])},
        "pinning": {key: value for key, value in pinning.items() if not key.endswith("_prefix")},
        "settings": {"quick": args.quick, "duration_s": duration, "warmup_requests": warmup,
                     "counter": "strace -c -f -p PID, attached after the warm-up, detached when wrk ends"},
        "commands": {str(depth): display(loads.command(loads.get(name), url, settings))
                     for depth, name in DEPTH_LOADS.items()},
        "groups": GROUPS,
        "skipped": skipped,
        "points": points,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(data), encoding="utf-8")
    print(f"wrote {display([str(out)])} and its .md in {data['elapsed_s']:.0f} s")
    print(conclusion(data))
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: system calls per request at each depth, fewest and most."""
    parts = []
    for depth in sorted({point["depth"] for point in data["points"]}):
        totals = {point["server"]: point["per_request"]["total"] for point in data["points"]
                  if point["depth"] == depth and point.get("per_request")}
        if totals:
            low, high = min(totals, key=totals.get), max(totals, key=totals.get)
            parts.append(f"depth {depth}: {low} {totals[low]:.2f} to {high} {totals[high]:.2f}")
    return ("system calls per request, " + "; ".join(parts)) if parts else "syscalls: nothing measured"


if __name__ == "__main__":
    raise SystemExit(main())
