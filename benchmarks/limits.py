# benchmarks/limits.py
"""What each stage does when it runs out of file descriptors.

    python -m benchmarks.limits                          every stage of this checkout: the table
    python -m benchmarks.limits --quick                  three stages, short windows: a look
    git worktree add /tmp/before COMMIT                  the servers as they were before a change...
    python -m benchmarks.limits --before /tmp/before     ...measured beside this checkout's

Per stage: a server with a soft RLIMIT_NOFILE of LIMIT, one keep-alive
client answered, then 2 x LIMIT clients at once, so its accept fails with
EMFILE and the rest wait in the accept queue.  While it is full: ``cpu``,
its CPU time over ``--window`` s of wall time (/proc/PID/stat, a share of
one core); ``keeper ms``, the keep-alive client's median wait over
``--asks`` requests; whether it is ``alive``.  After every client left:
``new client``, seconds until a new one is answered ("never" past
RECOVERY).  ``--before DIR`` also runs another checkout's servers
(``python -P -m tinyloop`` with PYTHONPATH=DIR), interleaved, with this
checkout's measuring code; a stage it lacks is n/a.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import experiment, output
from benchmarks.harness.machine import ROOT
from benchmarks.harness.process import choose_names
from benchmarks.harness.render import align
from tinyloop import stages
from tinyloop.testing import ServerProcess, http_get, recv_response

QUICK_STAGES = ["epoll", "coroutines", "aio"]
GET = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"
TIMEOUT = 5.0   # seconds for any one socket operation
LIMIT = 64      # the servers' RLIMIT_NOFILE
RECOVERY = 5.0  # seconds a new client may wait after the others leave


def run_one(stage: str, tree: Path, window: float, asks: int) -> dict[str, object]:
    """One stage of the checkout ``tree`` at its descriptor limit: ``status`` ("ok", or "n/a" and a
    ``reason``), ``cpu`` (share of one core), ``alive``, ``keeper_ms``, ``new_client_s`` (None: never)
    and ``log_lines`` (the server's standard error)."""
    command = [sys.executable, "-P", "-m", "tinyloop", "serve", stage, "--host", "127.0.0.1", "--port", "0"]
    server = ServerProcess(stage, command=command, env={"PYTHONPATH": str(tree)}, nofile=LIMIT)
    try:
        server.start()
    except RuntimeError as exc:
        return {"status": "n/a", "reason": str(exc).splitlines()[0]}
    record: dict[str, object] = {"status": "ok"}
    clients = []
    try:
        keeper, buffer = server.connect(TIMEOUT), bytearray()
        clients.append(keeper)
        keeper.sendall(GET)
        recv_response(keeper, buffer)
        for _ in range(2 * LIMIT):
            try:
                clients.append(server.connect(TIMEOUT))
            except OSError:
                break  # refused or reset: the server is gone, or turns clients away
        deadline = time.monotonic() + TIMEOUT
        while server.fd_count() < LIMIT - 1 and time.monotonic() < deadline and server.proc.poll() is None:
            time.sleep(0.02)
        time.sleep(0.2)
        if server.proc.poll() is None:
            before, started = server.cpu_seconds(), time.monotonic()
            time.sleep(window)
            if server.proc.poll() is None:
                record["cpu"] = round((server.cpu_seconds() - before) / (time.monotonic() - started), 3)
        record["alive"] = server.proc.poll() is None
        if record["alive"]:
            waits = []
            try:
                for _ in range(asks):
                    started = time.perf_counter()
                    keeper.sendall(GET)
                    recv_response(keeper, buffer)
                    waits.append(time.perf_counter() - started)
                record["keeper_ms"] = round(statistics.median(waits) * 1000, 2)
            except OSError:
                record["keeper_ms"] = None
        for sock in [*clients[1:], keeper]:  # the crowd first, then the keeper
            sock.close()
        record["new_client_s"] = recovery(server) if server.proc.poll() is None else None
        record["log_lines"] = len(server.stderr_lines)
    finally:
        for sock in clients:  # closed above, unless the run stopped early
            sock.close()
        server.stop()
    return record


def recovery(server: ServerProcess) -> float | None:
    """Seconds until a new client is answered, after the crowd left; None if not within RECOVERY."""
    started = time.monotonic()
    try:
        http_get(server.address, timeout=RECOVERY)
    except OSError:
        return None
    return round(time.monotonic() - started, 2)


def cells(record: dict | None) -> list[str]:
    """One checkout's three cells for a stage: CPU share, keeper ms, new client (or n/a, died)."""
    if record is None or record["status"] != "ok":
        return ["n/a", "", ""]
    if not record["alive"]:
        return ["died", "", ""]
    return ["?" if record.get("cpu") is None else f"{record['cpu']:.0%}",
            "none" if record.get("keeper_ms") is None else f"{record['keeper_ms']:.2f}",
            "never" if record["new_client_s"] is None else f"{record['new_client_s']:.1f} s"]


def render(data: dict) -> str:
    """The JSON's rows as an aligned text table, a column group per checkout, then what the columns mean."""
    s = data["settings"]
    trees = [t for t in ("before", "after") if any(t in row for row in data["rows"])]
    header = ["stage", *(name for tree in trees for name in (f"{tree}: CPU", "keeper ms", "new client"))]
    rows = [[row["stage"], *(text for tree in trees for text in cells(row.get(tree)))] for row in data["rows"]]
    return "\n".join([
        f"At the descriptor limit: RLIMIT_NOFILE {s['limit']}, {2 * s['limit']} clients connect;"
        f" server CPU over {s['window']:g} s", "", *("  " + line for line in align(header, rows)), "",
        "  CPU: share of one core while full;  keeper ms: median answer time of the keep-alive client",
        f"  meanwhile;  new client: seconds until one is answered after the others leave"
        f" (never: not within {s['recovery']:g} s).",
        f"  {data['machine']['cpu_model']}, {data['machine']['python']}, {data['date'][:10]}"]) + "\n"


def conclusion(data: dict) -> str:
    """The run in one line: how many stages keep serving at the descriptor limit, before and after."""
    def recovered(rows: list[dict], tree: str) -> str:
        fine = [row for row in rows if row[tree].get("alive") and row[tree].get("new_client_s") is not None]
        return f"{len(fine)} of {len(rows)} stages recovered"
    rows = data["rows"]
    if not any("before" in row for row in rows):
        return f"at the descriptor limit: {recovered(rows, 'after')}"
    had = [row for row in rows if row["before"]["status"] != "n/a"]  # the stages the other tree has
    return f"at the descriptor limit: {recovered(had, 'before')} before, {recovered(rows, 'after')} after"


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("limits", __doc__, repeat=None, pin=False)
    parser.add_argument("--stages", help=f"comma list (default: all; --quick: {','.join(QUICK_STAGES)})")
    parser.add_argument("--before", type=Path, help="also run the servers of this checkout (a git worktree)")
    parser.add_argument("--window", type=float, help="seconds of CPU measurement (default 2; --quick 0.5)")
    parser.add_argument("--asks", type=int, help="keep-alive requests while full (default 20; --quick 3)")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "limits.json")
    pick = experiment.settings(parser, args, {"window": 2.0, "asks": 20}, {"window": 0.5, "asks": 3})
    every = [stage.name for stage in stages.STAGES]
    clock = experiment.Clock()
    rows = []
    for name in choose_names(args.stages, every, "stage", QUICK_STAGES if args.quick else every):
        row: dict[str, object] = {"stage": name}
        if args.before:  # interleaved: before, then after, stage by stage
            row["before"] = run_one(name, args.before.resolve(), **pick)
        row["after"] = run_one(name, ROOT, **pick)
        rows.append(row)
        print(f"{name}: {json.dumps({k: v for k, v in row.items() if k != 'stage'})}", flush=True)
    data = experiment.document("limits", argv, clock, rows=rows, settings={
        "quick": args.quick, "limit": LIMIT, **pick, "recovery": RECOVERY,
        "cpu": "utime + stime from /proc/PID/stat over the window, divided by its wall time",
        "before": str(args.before) if args.before else None})
    return experiment.conclude(data, out, clock, render, conclusion)


if __name__ == "__main__":
    sys.exit(main())
