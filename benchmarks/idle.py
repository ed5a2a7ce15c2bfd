# benchmarks/idle.py
"""What do idle connections cost?  O(n) scans against O(ready), measured.

    python -m benchmarks.idle                               every readiness stage at 0, 250, 1000, 4000 idle
    python -m benchmarks.idle --quick                       poll and epoll at 0 and 250 idle: a look
    python -m benchmarks.idle --stages poll,epoll --counts 0,2000 --repeat 1

Per stage and count N: a fresh server, N idle keep-alive connections (each
answered once, then silent), then ``ab -k -c 10`` beside them.  select(2)
and poll(2) hand the kernel every descriptor on every wait, epoll(7) only
the ready ones: the server's CPU per request says what the idle ones cost.
Also recorded: req/s and p99 (ab's), the server's descriptors with the idle
connections open (proof that they were) and how many were still open after
the load, and where ``perf`` may count (root, or perf_event_paranoid <= 1)
the wait calls per request.  select cannot watch descriptors from FD_SETSIZE
(1024) on, so it is measured up to SELECT_CAP idle connections, and its row
says so.  Writes idle.json and idle.txt by the harness's output rule; the
book shows the reference through ``{bench-idle}``.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import loads, servers
from benchmarks.harness import experiment, output, render as render_table
from benchmarks.harness.machine import display
from benchmarks.harness.process import cpu_seconds, raise_nofile
from benchmarks.harness.summary import slope
from benchmarks.loads import Load, Settings
from tinyloop import stages
from tinyloop.http import HELLO
from tinyloop.raw.select_server import FD_SETSIZE
from tinyloop.testing import ServerProcess, recv_response

__all__ = ["COUNTS", "LOAD", "SELECT_CAP", "STAGES", "counts_for", "main", "render", "table"]

SCHEMA = experiment.SCHEMA
STAGES = ("select", "poll", "epoll", "epoll-et", "kqueue")
COUNTS = (0, 250, 1000, 4000)
DEFAULTS = {"requests": 20000, "repeat": 3, "warmup": 200, "timeout": 5.0, "run_timeout": 60.0}
QUICK = {"stages": ("poll", "epoll"), "counts": (0, 250), "requests": 2000, "repeat": 1}

# The busy clients: ten keep-alive connections, one request in flight on each.
LOAD = Load("ab-keepalive-10", "ab", 10, True, "ab -k -c 10, keep-alive, beside N idle connections",
            "the loop's cost per request while it also holds N connections with nothing to do")

# The select server refuses descriptors >= FD_SETSIZE.  Besides the idle
# connections it holds 0-2 (standard streams), the listener and ab's ten,
# and closed warm-up connections may not be reused at once: leave room.
SELECT_CAP = FD_SETSIZE - 24

# How many idle connections to connect before reading their answers: well
# under the listen backlog (tinyloop.serving.BACKLOG), so no SYN is dropped.
BATCH = 200

IDLE_REQUEST = b"GET / HTTP/1.1\r\nHost: idle\r\n\r\n"

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


# --- the idle clients ---------------------------------------------------------

def _settled_fd_count(process: ServerProcess, timeout: float = 2.0) -> int:
    """The server's descriptor count once it has stopped changing (or after ``timeout`` s): a
    connect() returns before the server has accepted, so at once a busy machine shows a few short."""
    deadline = time.monotonic() + timeout
    count, same = process.fd_count(), 0
    while same < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
        latest = process.fd_count()
        same = same + 1 if latest == count else 0
        count = latest
    return count


def open_idle(address: tuple[str, int], count: int, timeout: float) -> list[socket.socket]:
    """Open ``count`` connections to ``address``, each with one answered ``GET /``; return them open.

    Raises ``OSError`` (a ``ConnectionError`` if the server closes one,
    ``TimeoutError`` if it does not answer within ``timeout`` seconds) or
    ``RuntimeError`` for a wrong answer, having closed every socket it opened.
    """
    socks: list[socket.socket] = []
    try:
        while len(socks) < count:
            batch = []
            for _ in range(min(BATCH, count - len(socks))):
                sock = socket.create_connection(address, timeout=timeout)
                socks.append(sock)
                batch.append(sock)
                sock.sendall(IDLE_REQUEST)
            for sock in batch:
                status, _, body = recv_response(sock)
                if status != 200 or body != HELLO:
                    raise RuntimeError(f"GET / on an idle connection answered {status} {body[:40]!r}")
    except BaseException:
        close_all(socks)
        raise
    return socks


def still_open(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has neither closed nor written to (a poll with no wait)."""
    poller = select.poll()  # not select(): our own descriptors pass 1024
    for sock in socks:
        poller.register(sock, select.POLLIN | select.POLLRDHUP)
    return len(socks) - len(poller.poll(0))


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()
    socks.clear()


def raise_fd_limit(count: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE so that ``count`` idle clients fit; return it.

    The servers are started from here and inherit the limit, and they hold
    as many descriptors as we do.  Raises ``SystemExit`` if the hard limit
    is too low (``ulimit -Hn``, or /etc/security/limits.conf).
    """
    wanted = count + 256  # the idle clients, ab's, the harness's own files
    soft = raise_nofile(wanted)
    if soft < wanted:
        raise SystemExit(f"idle: {count} idle connections need {wanted} open files, and the hard "
                         f"limit is lower: lower --counts or raise it (ulimit -Hn)")
    return soft


# --- counting wait calls ------------------------------------------------------

class WaitCounter:
    """Count process ``pid``'s wait system calls (WAIT_CALLS) with ``perf stat``, from ``start()`` to ``stop()``.

    perf attaches with its counters off and turns them on and off when told
    through its control pipe (``--control``, perf-stat(1)), so the count
    covers exactly the load.  ``stop()`` returns the count, or None when perf
    could not count (absent, not allowed, no tracepoints), ``reason`` then
    saying why.  Tracing makes every system call a little dearer, for every
    stage alike.  The pipes are polled, not select()ed: past 1024 idle clients
    their descriptors are too.
    """

    def __init__(self, pid: int, timeout: float = 5.0) -> None:
        self.reason: str | None = None
        self.timeout = timeout
        self._proc: subprocess.Popen[str] | None = None
        if shutil.which("perf") is None:
            self.reason = "perf is not installed"
            return
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        events = ",".join(f"syscalls:sys_enter_{name}" for name in WAIT_CALLS)
        argv = ["perf", "stat", "-x,", "-D", "-1", "--control", f"fd:{ctl_r},{ack_w}", "-e", events, "-p", str(pid)]
        try:
            self._proc = subprocess.Popen(argv, pass_fds=(ctl_r, ack_w), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True)
        except OSError as error:
            self.reason = f"perf did not start: {error}"
            os.close(self._ctl)
            os.close(self._ack)
        finally:
            os.close(ctl_r)
            os.close(ack_w)

    def _command(self, word: str) -> bool:
        """Send ``word`` to perf; True once it acknowledged within the time-out."""
        try:
            os.write(self._ctl, word.encode() + b"\n")
            poller = select.poll()
            poller.register(self._ack, select.POLLIN)
            return bool(poller.poll(self.timeout * 1000)) and os.read(self._ack, 16).startswith(b"ack")
        except OSError:
            return False

    def start(self) -> None:
        if self._proc is not None and not self._command("enable"):
            self.reason = "perf did not start counting: " + self._finish()[:200]

    def stop(self) -> int | None:
        if self._proc is None or self.reason:
            self._finish()
            return None
        self._command("disable")
        err = self._finish()
        counts = [int(line.split(",")[0]) for line in err.splitlines()
                  if re.match(r"\d+,", line) and "syscalls:sys_enter_" in line]
        if not counts:
            self.reason = "perf counted nothing: " + (err.strip().splitlines() or ["no output"])[-1][:200]
            return None
        return sum(counts)

    def _finish(self) -> str:
        """Stop perf (on SIGINT it prints its counts), close the pipes; perf's standard error."""
        if self._proc is None:
            return ""
        proc, self._proc = self._proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        os.close(self._ctl)
        os.close(self._ack)
        return err or ""


# --- one run ------------------------------------------------------------------

def measure(stage: str, idle: int, settings: Settings, pinning: dict, workdir: Path,
            warmup: int, count_waits: bool) -> dict:
    """One run: ``stage``'s server, ``idle`` idle connections, then ab's load.

    Returns the run's record; ``status`` is ``"ok"``, ``"timeout"`` or
    ``"error"`` (the server did not start, refused or dropped an idle
    connection, or died), with a ``note``.
    """
    record: dict = {"stage": stage, "idle": idle, "status": "error", "note": None,
                    "rps": None, "p50_ms": None, "p99_ms": None, "completed": None, "failed": None,
                    "cpu_s": None, "cpu_us_per_req": None, "waits": None, "waits_per_req": None, "waits_note": None,
                    "server_fds": None, "server_fds_after": None, "idle_still_open": None,
                    "backend": None, "setup_s": None}
    started = time.monotonic()
    process, failure = servers.start(servers.stage_server(stages.get(stage)), pinning["server_prefix"],
                                     warmup, settings.socket_timeout)
    if failure is not None:
        record["status"], record["note"] = failure
        return record
    idle_socks: list[socket.socket] = []
    counter = None
    try:
        try:
            idle_socks = open_idle(process.address, idle, settings.socket_timeout)
        except (OSError, RuntimeError) as error:
            record["note"] = f"opening {idle} idle connections: {type(error).__name__}: {error}"
            return record
        record["setup_s"] = round(time.monotonic() - started, 2)
        record["server_fds"] = _settled_fd_count(process)
        if count_waits:
            counter = WaitCounter(process.pid, settings.socket_timeout)
            counter.start()
        before = cpu_seconds(process)
        try:
            result, _, output = loads.run(LOAD, f"http://{process.host}:{process.port}/", settings,
                                          workdir, pinning["load_prefix"])
        finally:
            after = cpu_seconds(process)
            if counter is not None:
                record["waits"] = counter.stop()
                if counter.reason:
                    record["waits_note"] = counter.reason
        record.update(rps=result.rps, p50_ms=result.p50_ms, p99_ms=result.p99_ms,
                      completed=result.completed, failed=result.failed)
        exit_code = process.proc.poll() if process.proc else None
        if exit_code is None:
            record["server_fds_after"] = process.fd_count()
            record["idle_still_open"] = still_open(idle_socks)
        if before is not None and after is not None and result.completed:
            record["cpu_s"] = round(after - before, 6)
            record["cpu_us_per_req"] = (after - before) * 1e6 / result.completed
            if record["waits"] is not None:
                record["waits_per_req"] = record["waits"] / result.completed
        if exit_code is not None:
            record["note"] = f"the server exited with code {exit_code} during the run"
        elif result.completed is None:
            tail = output.strip().splitlines()[-1:] or ["no output"]
            record["note"] = result.error or f"could not read ab's output: {tail[0]}"
        elif result.timed_out or not result.completed:
            record["status"] = "timeout"
            record["note"] = result.error or "no response"
        elif record["idle_still_open"] != idle:
            record["note"] = f"the server closed {idle - record['idle_still_open']} idle connections"
        else:
            record["status"] = "ok"
        return record
    finally:
        try:
            if counter is not None:
                counter.stop()  # nothing to do once stopped; stops perf if the load raised
        finally:
            process.stop()
            close_all(idle_socks)  # the server has closed its ends; now ours
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
    return ("CPU µs per request, fewest -> most idle connections: " + ", ".join(parts)) if parts else \
        "idle connections: too few counts measured to compare"


# --- the table ----------------------------------------------------------------

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


# --- the whole run ------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("idle", __doc__, repeat=DEFAULTS["repeat"], aliases=("--json",))
    parser.add_argument("--stages", help=f"comma list (default {','.join(STAGES)}; --quick poll,epoll)")
    parser.add_argument("--counts", help=f"idle connections, comma list (default {','.join(map(str, COUNTS))}; "
                                         "--quick 0,250)")
    parser.add_argument("--requests", type=int, help=f"ab's -n per run (default {DEFAULTS['requests']})")
    parser.add_argument("--warmup", type=int, default=DEFAULTS["warmup"],
                        help="GET / on one connection before the idle ones")
    parser.add_argument("--timeout", type=float, default=DEFAULTS["timeout"],
                        help="seconds any client waits on a silent server")
    parser.add_argument("--run-timeout", type=float, default=DEFAULTS["run_timeout"],
                        help="wall-clock limit on one ab run, seconds")
    parser.add_argument("--no-perf", action="store_true", help="do not count wait system calls with perf")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "idle.json")
    base = QUICK if args.quick else {"stages": STAGES, "counts": COUNTS, **DEFAULTS}
    try:
        chosen = [stages.get(name.strip()).name for name in (args.stages or ",".join(base["stages"])).split(",")
                  if name.strip()]
        counts = sorted({int(n) for n in (args.counts or ",".join(map(str, base["counts"]))).split(",") if n.strip()})
    except (KeyError, ValueError) as error:
        parser.error(str(error))
    requests, repeat = args.requests or base["requests"], args.repeat or base["repeat"]
    if not chosen or not counts or min(counts) < 0 or min(requests, repeat, args.warmup) < 1:
        parser.error("--stages and --counts need a stage and a count >= 0; --requests, --repeat, --warmup >= 1")
    if shutil.which("ab") is None:
        raise SystemExit("idle: ab not found; install ApacheBench (Debian: apache2-utils)")
    limit = raise_fd_limit(max(counts))
    pinning = experiment.pinning(args)
    settings = Settings(requests={LOAD.name: requests}, duration=0.0,
                        socket_timeout=args.timeout, run_timeout=args.run_timeout)
    cells = [(stage, measured) for stage in chosen
             for measured in dict.fromkeys(counts_for(stage, counts).values()) if measured is not None]
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="tinyloop-idle-") as workdir:
        runs = experiment.interleave(
            cells, repeat,
            lambda cell: measure(*cell, settings, pinning, Path(workdir), args.warmup, not args.no_perf),
            lambda cell: f"{cell[0]:<8} {cell[1]:>5} idle",
            lambda r: f"fds {r['server_fds']}, cpu {r['cpu_us_per_req']:.0f} µs/req, {r['rps']:.0f} req/s")
    data = experiment.document(
        "idle", sys.argv[1:] if argv is None else argv, clock, pinning=pinning,
        tools={"ab": servers.tool_versions()["ab"]},
        settings={"stages": chosen, "counts": counts, "requests": requests, "repeat": repeat,
                  "warmup_requests": args.warmup, "quick": args.quick,
                  "select_cap": SELECT_CAP, "fd_setsize": FD_SETSIZE, "rlimit_nofile": limit,
                  "socket_timeout_s": args.timeout, "run_timeout_s": args.run_timeout,
                  "waits_counted": any(run["waits"] is not None for run in runs),
                  "waits_note": "--no-perf" if args.no_perf else next(
                      (run["waits_note"] for run in runs if run.get("waits_note")), None)})
    # The harness's fold: medians of every figure by stage and idle count; CPU µs/req decides noise.
    results = experiment.fold(runs, "stage", "idle", [key for key, _, _ in FIGURES.values()],
                              deciding=("cpu_us_per_req",))
    data.update(load_command=display(loads.command(LOAD, "http://127.0.0.1:PORT/", settings)),
                runs=runs, results=results, elapsed_s=clock.elapsed())
    text = render(data)
    experiment.finish(data, out, text, conclusion(data), extra={out.with_suffix(".txt"): text})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
