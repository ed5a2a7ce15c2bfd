# benchmarks/idle.py
"""What do idle connections cost?  O(n) scans against O(ready), measured.

    python -m benchmarks.idle                      every readiness stage at 0, 250, 1000, 4000 idle
    python -m benchmarks.idle --quick              poll and epoll at 0 and 250 idle: a look
    python -m benchmarks.idle --stages poll,epoll --counts 0,2000 --repeat 1

Per stage and count N: a fresh server, N idle keep-alive connections (each
answered once, then silent), then ``ab -k -c 10`` beside them; the server's
CPU per request says what the idle ones cost.  Also recorded: ab's req/s
and p99, the server's descriptors with the idle connections open and after
the load (proof that they were), and, where ``perf`` may count, the wait
calls per request.  select is measured up to SELECT_CAP idle connections.
Writes idle.json and idle.txt; the book shows the reference through
``{bench-idle}``.
"""

from __future__ import annotations

import re
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import loads, servers
from benchmarks.harness import experiment, output, render as render_table
from benchmarks.harness.machine import display
from benchmarks.harness.process import choose_names, cpu_seconds, raise_nofile
from benchmarks.harness.summary import slope
from benchmarks.loads import Load, Settings
from tinyloop import stages
from tinyloop.http import HELLO
from tinyloop.raw.select_server import FD_SETSIZE
from tinyloop.testing import Crowd, ServerProcess

__all__ = ["LOAD", "SELECT_CAP", "STAGES", "counts_for", "main", "render", "table"]

STAGES = ("select", "poll", "epoll", "epoll-et", "kqueue")
FULL = {"stages": ",".join(STAGES), "counts": "0,250,1000,4000", "requests": 20000, "repeat": 3}
QUICK = {"stages": "poll,epoll", "counts": "0,250", "requests": 2000, "repeat": 1}
WARMUP = 200            # GET / on one connection before the idle ones
TIMEOUT = 5.0           # seconds ab and perf wait on a silent peer
RUN_TIMEOUT = 60.0      # wall-clock seconds for one ab run, and to open and answer the idle connections

# The busy clients: ten keep-alive connections, one request in flight on each.
LOAD = Load("ab-keepalive-10", "ab", 10, True, "ab -k -c 10, keep-alive, beside N idle connections",
            "the loop's cost per request while it also holds N connections with nothing to do")

# The select server refuses descriptors >= FD_SETSIZE.  Besides the idle
# connections it holds 0-2 (standard streams), the listener and ab's ten,
# and closed warm-up connections may not be reused at once: leave room.
SELECT_CAP = FD_SETSIZE - 24

# The figures a summary takes the median of, and how the table shows each.
FIGURES = {"cpu": ("cpu_us_per_req", "CPU µs/req", "{:.0f}"),
           "rps": ("rps", "req/s", "{:.0f}"),
           "p99": ("p99_ms", "p99 ms", "{:.2f}"),
           "waits": ("waits_per_req", "wait calls per request", "{:.3f}"),
           "fds": ("server_fds", "server descriptors, idle connections open", "{:.0f}")}

# Every system call that waits for readiness, as perf's tracepoints name them.
WAIT_CALLS = ("select", "pselect6", "poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2")


def counts_for(stage: str, counts: list[int]) -> dict[int, int | None]:
    """Which idle count each requested count is measured at, for ``stage``.

    ``{requested: measured}``: the same number, except that select is capped
    at SELECT_CAP, and a count above the cap whose capped run is already
    planned maps to None (nothing more to measure).
    """
    if stage != "select":
        return {n: n for n in counts}
    out: dict[int, int | None] = {}
    for n in counts:
        capped = min(n, SELECT_CAP)
        out[n] = None if capped != n and capped in out.values() else capped
    return out


def _settled_fd_count(process: ServerProcess, timeout: float = 2.0) -> int:
    """The server's descriptor count once it has stopped changing (or after ``timeout`` s): the
    warm-up's closed connection may still be open on a busy machine."""
    deadline = time.monotonic() + timeout
    count, same = process.fd_count(), 0
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
        latest = process.fd_count()
        same = same + 1 if latest == count else 0
        count = latest
    return count


def still_open(crowd: Crowd) -> int:
    """How many of ``crowd``'s connections the server has neither closed nor written to (polled, no wait)."""
    poller = select.poll()  # not select(): our own descriptors pass 1024
    for sock in crowd.sockets:
        poller.register(sock, select.POLLIN | select.POLLRDHUP)
    return len(crowd) - len(poller.poll(0))


class WaitCounter:
    """``perf stat`` counting process ``pid``'s wait system calls (WAIT_CALLS) over a ``with`` block.

    perf attaches with its counters off (``-D -1``) and switches them when
    told on its standard input (``--control fd:0,1``, perf-stat(1)), so the
    count covers exactly the block.  After it, ``count`` is the total, or
    None when perf could not count (absent, not allowed), ``reason`` saying
    why.  Tracing makes every system call a little dearer, for every stage alike.
    """

    def __init__(self, pid: int, timeout: float) -> None:
        self.timeout = timeout
        self.count: int | None = None
        self.reason: str | None = None
        events = ",".join(f"syscalls:sys_enter_{name}" for name in WAIT_CALLS)
        argv = ["perf", "stat", "-x,", "-D", "-1", "--control", "fd:0,1", "-e", events, "-p", str(pid)]
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, start_new_session=True)
        except OSError as error:
            self.reason = f"perf did not start: {error}"

    def __enter__(self) -> WaitCounter:
        if self._proc is not None and not self._tell(b"enable"):
            self.reason = "perf did not start counting: " + self._stop()[-200:]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._tell(b"disable")
        text = self._stop()
        counts = [int(line.split(",")[0]) for line in text.splitlines() if re.match(r"\d+,.*syscalls:", line)]
        if counts:
            self.count = sum(counts)
        else:
            self.reason = "perf counted nothing: " + (text.strip().splitlines() or ["no output"])[-1][:200]

    def _tell(self, word: bytes) -> bool:
        """Send ``word`` to perf; True once it acknowledged within the time-out."""
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(word + b"\n")
            self._proc.stdin.flush()
            poller = select.poll()  # not select(): past 1024 idle clients the pipes' descriptors are too
            poller.register(self._proc.stdout, select.POLLIN)
            return bool(poller.poll(self.timeout * 1000)) and self._proc.stdout.read1(16).startswith(b"ack")
        except OSError:
            return False

    def _stop(self) -> str:
        """Stop perf (on SIGINT it prints its counts); what it wrote on its standard error."""
        proc, self._proc = self._proc, None
        assert proc is not None
        proc.send_signal(signal.SIGINT)
        try:
            return proc.communicate(timeout=self.timeout)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.communicate()[1].decode(errors="replace")


def measure(stage: str, idle: int, settings: Settings, pinning: dict, workdir: Path) -> dict:
    """One run: ``stage``'s server, ``idle`` idle connections, then ab's load.

    Returns the run's record; ``status`` is ``"ok"``, ``"timeout"`` or
    ``"error"`` (the server did not start, refused or dropped an idle
    connection, or died), with a ``note``.
    """
    record: dict = {"stage": stage, "idle": idle, "status": "error", **dict.fromkeys((
        "note", "rps", "p50_ms", "p99_ms", "completed", "failed", "cpu_s", "cpu_us_per_req", "waits",
        "waits_per_req", "waits_note", "server_fds", "server_fds_after", "idle_still_open", "backend",
        "setup_s"))}
    started = time.monotonic()
    process, failure = servers.start(servers.stage_server(stages.get(stage)), pinning["server_prefix"],
                                     WARMUP, TIMEOUT)
    if process is None:
        record["status"], record["note"] = failure
        return record
    crowd = Crowd(process.address, timeout=RUN_TIMEOUT)
    try:
        try:
            crowd.open(idle)
            if wrong := [answer for answer in crowd.ask() if answer != (200, HELLO)]:
                raise RuntimeError(f"{len(wrong)} answered {wrong[0][0]} {wrong[0][1][:40]!r}")
        except (OSError, RuntimeError) as error:  # TimeoutError is an OSError
            record["note"] = f"opening {idle} idle connections: {type(error).__name__}: {error}"
            return record
        record["setup_s"] = round(time.monotonic() - started, 2)
        record["server_fds"] = _settled_fd_count(process)
        with WaitCounter(process.pid, TIMEOUT) as counter:
            before = cpu_seconds(process)
            result, _, text = loads.run(LOAD, f"http://{process.host}:{process.port}/", settings,
                                        workdir, pinning["load_prefix"])
            after = cpu_seconds(process)
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms, completed=result.completed,
                      failed=result.failed, waits=counter.count, waits_note=counter.reason)
        exit_code = process.proc.poll() if process.proc else None
        if exit_code is None:
            record["server_fds_after"] = process.fd_count()
            record["idle_still_open"] = still_open(crowd)
        if before is not None and after is not None and result.completed:
            record["cpu_s"] = round(after - before, 6)
            record["cpu_us_per_req"] = (after - before) * 1e6 / result.completed
            if counter.count is not None:
                record["waits_per_req"] = counter.count / result.completed
        if exit_code is not None:
            record["note"] = f"the server exited with code {exit_code} during the run"
        elif result.completed is None:
            tail = (text.strip().splitlines() or ["no output"])[-1]
            record["note"] = result.error or f"could not read ab's output: {tail}"
        elif result.timed_out or not result.completed:
            record["status"], record["note"] = "timeout", result.error or "no response"
        elif record["idle_still_open"] != idle:
            record["note"] = f"the server closed {idle - record['idle_still_open']} idle connections"
        else:
            record["status"] = "ok"
        return record
    finally:
        process.stop()
        crowd.close()  # after the server: its ends close first, so TIME_WAIT holds none of our ports
        # What the server said it runs on ("kqueue: using kqueue emulated on epoll").
        record["backend"] = next((line.partition(": using ")[2].strip() for line in process.stderr_lines
                                  if ": using " in line), None)


def conclusion(data: dict) -> str:
    """The run in one line: each stage's CPU µs per request with no idle connection and with the most."""
    parts = []
    for stage, by_count in data["results"].items():
        measured = sorted((int(n), row["cpu_us_per_req"]) for n, row in by_count.items()
                          if row["cpu_us_per_req"] is not None)
        if len(measured) >= 2:
            (_, first), (high, last) = measured[0], measured[-1]
            parts.append(f"{stage} {first:.0f} -> {last:.0f} ({last / first:.2f}x at {high})" if first
                         else f"{stage} {first:.0f} -> {last:.0f}")
    return experiment.sentence("CPU µs per request, fewest -> most idle connections", parts,
                               "idle connections: too few counts measured to compare")


def _row_label(data: dict, stage: str) -> str:
    backend = next((run["backend"] for run in data["runs"] if run["stage"] == stage and run["backend"]), None)
    if stage == "select" and any(n > data["settings"]["select_cap"] for n in data["settings"]["counts"]):
        return f"select (at most {data['settings']['select_cap']} idle: FD_SETSIZE)"
    if backend and "emulated" in backend:
        return f"{stage} (emulated on epoll)"
    return stage


def table(data: dict, figure: str = "cpu") -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: a row per stage, a column per idle count, cells of ``figure`` (a key of FIGURES).

    A cell is the median, ``"—"`` where nothing was measured, or the failed
    runs' status; ``*`` marks a median of fewer runs than were made, ``(at
    N)`` a count select was capped to.  The CPU table adds least-squares
    slopes against the idle count: ``+µs/req per 1000 idle`` and, where waits
    were counted, ``ns per idle fd per wait`` (of CPU µs per wait call).
    """
    key, _, fmt = FIGURES[figure]
    counts = data["settings"]["counts"]
    header = ["stage", *(f"{n} idle" for n in counts)]
    slopes = figure == "cpu"
    per_wait = slopes and data["settings"].get("waits_counted")
    if slopes:
        header.append("+µs/req per 1000 idle")
    if per_wait:
        header.append("ns per idle fd per wait")
    rows = []
    for stage in data["settings"]["stages"]:
        results = data["results"].get(stage, {})
        row = [_row_label(data, stage)]
        per_req: list[tuple[int, float]] = []   # (idle, CPU µs per request)
        per_call: list[tuple[int, float]] = []  # (idle, CPU µs per wait call)
        for requested, measured in counts_for(stage, counts).items():
            summary = results.get(str(measured)) if measured is not None else None
            if summary is None:
                row.append("—")
                continue
            value = summary[key]
            if value is None:  # every run failed, or (wait calls) perf could not count
                row.append("—" if summary["status"] == "ok" else summary["status"])
                continue
            cell = fmt.format(value) + ("*" if summary["status"] == "partial" else "")
            row.append(cell + (f" (at {measured})" if measured != requested else ""))
            cpu, waits = summary["cpu_us_per_req"], summary["waits_per_req"]
            if cpu is not None:
                per_req.append((measured, cpu))
                if waits:
                    per_call.append((measured, cpu / waits))
        for wanted, points, shown in ((slopes, per_req, "{:+.1f}"), (per_wait, per_call, "{:+.0f}")):
            if wanted:
                fitted = slope(points)
                row.append("—" if fitted is None else shown.format(fitted * 1000))
        rows.append(row)
    return header, rows


NOTES = {
    "cpu": "CPU µs/req: the server's user + system CPU time during ab's load, divided by the requests "
           "it answered. Column N: the same load with N idle keep-alive connections open beside it, "
           "each answered once before the load and silent during it.",
    "waits": "wait calls: select/pselect6, poll/ppoll and epoll_wait/epoll_pwait system calls during "
             "the load, counted by perf. For select and poll each is at least one pass over every "
             "descriptor; for epoll a copy of the ready list. The kqueue row counts the emulation's epoll_wait calls.",
    "fds": "server descriptors: /proc/PID/fd just before the load, so the idle connections and the "
           "listener, standard streams and epoll instances; after the load the idle connections were "
           "all still open, or the cell says how the run failed.",
}


def render(data: dict) -> str:
    """The JSON as text: a table per figure (wait calls only if counted), notes, and the machine."""
    settings = data["settings"]
    out = [f"Idle connections: {LOAD.title}, {settings['requests']} requests per run",
           f"  $ {data['load_command']}", ""]
    for figure in FIGURES:
        if figure == "waits" and not settings.get("waits_counted"):
            continue
        header, rows = table(data, figure)
        out += [FIGURES[figure][1], *render_table.align(header, rows), ""]
    out += [f"  {stage} at {idle} idle: {summary['note']}" for stage, by_count in data["results"].items()
            for idle, summary in by_count.items() if summary["note"]]
    out += [f"- {NOTES[key]}" for key in NOTES if key != "waits" or settings.get("waits_counted")]
    out.append(f"- {render_table.describe_machine(data)}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("idle", __doc__, repeat=FULL["repeat"])
    parser.add_argument("--stages", help=f"comma list (default {FULL['stages']}; --quick {QUICK['stages']})")
    parser.add_argument("--counts", help=f"idle connections, comma list (default {FULL['counts']}; "
                                         f"--quick {QUICK['counts']})")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "idle.json")
    pick = experiment.settings(parser, args, FULL, QUICK)
    chosen = choose_names(pick["stages"], list(STAGES), "stage", [])
    try:
        counts = sorted({int(n) for n in pick["counts"].split(",") if n.strip()})
    except ValueError as error:
        parser.error(f"--counts: {error}")
    if not chosen or not counts or min(counts) < 0:
        parser.error("--stages and --counts need a stage and a count >= 0")
    experiment.require("idle", "ab")
    need = max(counts) + 256  # the idle clients, ab's, the harness's own files; the servers inherit the limit
    if (limit := raise_nofile(need)) < need:
        raise SystemExit(f"idle: {max(counts)} idle connections need {need} open files, and the hard "
                         f"limit is lower: lower --counts or raise it (ulimit -Hn)")
    pinning = experiment.pinning(args)
    settings = Settings(requests={LOAD.name: pick["requests"]}, duration=0.0,
                        socket_timeout=TIMEOUT, run_timeout=RUN_TIMEOUT)
    cells = [(stage, measured) for stage in chosen
             for measured in dict.fromkeys(counts_for(stage, counts).values()) if measured is not None]
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-idle-") as workdir:
        runs = experiment.interleave(
            cells, pick["repeat"], lambda cell: measure(*cell, settings, pinning, Path(workdir)),
            lambda cell: f"{cell[0]:<8} {cell[1]:>5} idle",
            lambda r: f"fds {r['server_fds']}, cpu {r['cpu_us_per_req']:.0f} µs/req, {r['rps']:.0f} req/s")
    data = experiment.document(
        "idle", argv, clock, pinning=pinning, tools={"ab": servers.tool_versions()["ab"]},
        settings={"stages": chosen, "counts": counts, "requests": pick["requests"], "repeat": pick["repeat"],
                  "warmup_requests": WARMUP, "quick": args.quick,
                  "select_cap": SELECT_CAP, "fd_setsize": FD_SETSIZE, "rlimit_nofile": limit,
                  "socket_timeout_s": TIMEOUT, "run_timeout_s": RUN_TIMEOUT,
                  "waits_counted": any(run["waits"] is not None for run in runs),
                  "waits_note": next((run["waits_note"] for run in runs if run.get("waits_note")), None)},
        load_command=display(loads.command(LOAD, "http://127.0.0.1:PORT/", settings)), runs=runs,
        # Medians of every figure by stage and idle count; CPU µs/req decides noise.
        results=experiment.fold(runs, "stage", "idle", [key for key, _, _ in FIGURES.values()],
                                deciding=("cpu_us_per_req",)))
    return experiment.conclude(data, out, clock, render, conclusion)


if __name__ == "__main__":
    raise SystemExit(main())
