# benchmarks/fairness.py
"""How long does a fast request wait behind a slow one?  p50/p99 latency, measured.

    python -m benchmarks.fairness                   every server, with and without a compute load
    python -m benchmarks.fairness --quick           two servers, few requests: a look
    python -m benchmarks.fairness --servers coroutines,threaded --requests 200 --repeat 5
    python -m benchmarks.fairness --profile callbacks,coroutines --reference     the book's profile.txt

Per row: a fresh server (warmed up, stopped in ``finally``), ``--requests``
fast ``GET /`` from ``--clients`` keep-alive clients, each pausing 1 to 10 ms
(random.Random(seed): a rerun sends the same sequence), latency measured by
the client from just before the send to the end of the answer.  In the rows
with a background load one more client meanwhile asks ``GET
/compute?ms=50`` again and again.  The servers:

    threaded             a thread per connection (Part 0): the kernel preempts
    coroutines           one thread, cooperative: a handler runs until it awaits
    coroutines+thread    the same, each handler call run in a thread pool
    coroutines+yield     the same, /compute giving the loop back every 1 ms

The server runs on one CPU and the clients on the other, but not at
real-time priority: under SCHED_FIFO the threaded server's waiting thread
never got the core to ask for the GIL (p50 beside /compute 45 ms, not 4).
Run it on a quiet machine.  ``--profile STAGES`` instead runs each stage
under cProfile (CPU time, around ``serve()`` only) while ``ab -k -n 2000
-c 10`` loads it, and sums the time by layer into profile.txt.
"""

from __future__ import annotations

import random
import socket
import statistics
import sys
import threading
import time
from collections.abc import Sequence

from benchmarks.harness import experiment, output
from benchmarks.harness import render as render_table
from benchmarks.harness.process import choose_names, choose_pinning
from benchmarks.harness.stage_profile import profile_stage
from tinyloop.coroutines.server import COMPUTE_ENV
from tinyloop.testing import ServerProcess, recv_response

SCHEMA = experiment.SCHEMA
QUICK = {"servers": ("threaded", "coroutines"), "requests": 40}
FIGURES = ("requests", "p50_ms", "p99_ms", "max_ms", "computes")
TIMEOUT = 10.0  # seconds any one request may take before the row fails

# label -> (stage, environment)
SERVERS: dict[str, tuple[str, dict[str, str]]] = {
    "threaded": ("threaded", {}),
    "coroutines": ("coroutines", {COMPUTE_ENV: "inline"}),
    "coroutines+thread": ("coroutines", {COMPUTE_ENV: "thread"}),
    "coroutines+yield": ("coroutines", {COMPUTE_ENV: "yield"}),
}

FAST = b"GET / HTTP/1.1\r\nHost: fairness\r\n\r\n"


def _fast_client(address: tuple[str, int], count: int, seed: int, out: list[float]) -> None:
    rng = random.Random(seed)
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = bytearray()
        for _ in range(count):
            time.sleep(rng.uniform(0.001, 0.010))
            start = time.perf_counter()
            sock.sendall(FAST)
            status, _, _ = recv_response(sock, buffer)
            out.append(time.perf_counter() - start)
            if status != 200:
                raise RuntimeError(f"GET / answered {status}")


def _compute_client(address: tuple[str, int], path: str, stop: threading.Event, done: list[int]) -> None:
    request = f"GET {path} HTTP/1.1\r\nHost: fairness\r\n\r\n".encode()
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        buffer = bytearray()
        while not stop.is_set():
            sock.sendall(request)
            recv_response(sock, buffer)
            done[0] += 1


def measure(server: str, *, requests: int, clients: int, compute_ms: int | None, seed: int,
            prefix: Sequence[str] = ()) -> dict:
    """One run: start ``server``, run the fast clients (and the compute client), stop it.

    Returns the run's record: ``server``, ``background`` ("none" or
    "/compute?ms=N"), ``status`` ("ok", or "error" with a ``note``), and
    FIGURES: fast requests answered, their p50/p99/max latency in ms, and
    the /compute requests answered meanwhile.  ``prefix`` goes before the
    server's command (the harness's pinning: ``taskset -c 0``).
    """
    stage, env = SERVERS[server]
    background = "none" if compute_ms is None else f"/compute?ms={compute_ms}"
    command = [*prefix, sys.executable, "-m", "tinyloop", "serve", stage, "--host", "127.0.0.1", "--port", "0"]
    with ServerProcess(stage, env=env, command=command) as proc:
        for _ in range(20):  # warm-up: imports, first connections, thread pool
            _fast_client(proc.address, 1, seed, [])
        stop = threading.Event()
        computes = [0]
        workers: list[threading.Thread] = []
        if compute_ms is not None:
            workers.append(threading.Thread(target=_compute_client, daemon=True,
                                            args=(proc.address, background, stop, computes)))
            workers[0].start()
            time.sleep(0.1)  # the compute load is running before we measure
        latencies: list[list[float]] = [[] for _ in range(clients)]
        fast = [threading.Thread(target=_fast_client, daemon=True,
                                 args=(proc.address, requests // clients, seed + i, latencies[i]))
                for i in range(clients)]
        for thread in fast:
            thread.start()
        for thread in fast:
            thread.join(TIMEOUT * requests)
        stop.set()
        for thread in workers:
            thread.join(TIMEOUT)
    samples = sorted(s for per_client in latencies for s in per_client)
    record = {"server": server, "background": background}
    if len(samples) < 2:
        return {**record, "status": "error", "note": f"only {len(samples)} requests were answered"}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {**record, "status": "ok", "requests": len(samples), "p50_ms": round(cuts[49] * 1e3, 2),
            "p99_ms": round(cuts[98] * 1e3, 2), "max_ms": round(samples[-1] * 1e3, 2), "computes": computes[0]}


def fold(records: list[dict]) -> list[dict]:
    """One row per (server, background), in run order: the harness's fold (medians, min-max, noisy on p99)."""
    folded = experiment.fold(records, "background", "server", FIGURES, deciding=("p99_ms",), ratios=())
    rows = []
    for record in records:
        if record["rep"] == 1:
            stage, env = SERVERS[record["server"]]
            summary = folded[record["background"]][record["server"]]
            rows.append({"server": record["server"], "stage": stage, "env": env, "background": record["background"],
                         **{key: value for key, value in summary.items() if key != "ratio"}})
    return rows


def table(data: dict) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of ``data`` (this script's JSON), as the book's {bench-fairness} shows them."""
    header = ["server", "background load", "requests", "p50 ms", "p99 ms", "p99 min–max", "max ms", "computes"]
    rows = [[row["server"], "none" if row["background"] == "none" else f"1 client: GET {row['background']}",
             *([render_table.number(row["requests"]), render_table.number(row["p50_ms"], 2),
                render_table.number(row["p99_ms"], 2),
                render_table.spread_cell((row.get("spread") or {}).get("p99_ms"), row.get("noisy"), 2),
                render_table.number(row["max_ms"], 2), render_table.number(row["computes"])]
               if row.get("p99_ms") is not None else [row.get("note") or "failed", *[""] * 5])]
            for row in data["rows"]]
    return header, rows


def render(data: dict) -> str:
    """The rows of ``data`` (this script's JSON) as an aligned text table, with how it was measured."""
    settings = data["settings"]
    return "\n".join([*render_table.align(*table(data)), "",
                      f"{settings['clients']} fast keep-alive clients, {settings['requests']} GET / per run, "
                      "1-10 ms pauses; latency measured by the client.",
                      render_table.describe_machine(data)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("fairness", __doc__, pin=False, aliases=("--json",))
    parser.add_argument("--servers", help=f"comma list from {', '.join(SERVERS)} (default: all; "
                                          f"--quick {','.join(QUICK['servers'])})")
    parser.add_argument("--requests", type=int, help=f"fast requests per row (default 400; --quick {QUICK['requests']})")
    parser.add_argument("--clients", type=int, default=4, help="fast keep-alive clients (default 4)")
    parser.add_argument("--compute-ms", type=int, default=50, help="the slow handler's CPU time (default 50)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", metavar="STAGES",
                        help="instead: profile these stages (comma list) under ab -k, by layer, into profile.txt")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "fairness.json")
    pinning = choose_pinning(False)  # the server on one CPU, this process (the clients) on the other
    if args.profile:
        prefix = pinning["server_prefix"]
        text = "\n".join(profile_stage(stage.strip(), args.requests or 2000, prefix)
                         for stage in args.profile.split(",") if stage.strip())
        print(text, end="")
        print(f"wrote {output.relative(output.write_text(text, out.with_name('profile.txt')))}")
        return 0
    chosen = choose_names(args.servers, list(SERVERS), "server", list(QUICK["servers"] if args.quick else SERVERS))
    requests = args.requests or (QUICK["requests"] if args.quick else 400)
    repeat = args.repeat or (1 if args.quick else 3)
    clock = experiment.Clock()
    records = experiment.interleave(
        [(name, compute_ms) for name in chosen for compute_ms in (None, args.compute_ms)], repeat,
        lambda cell: measure(cell[0], requests=requests, clients=args.clients, compute_ms=cell[1], seed=args.seed,
                             prefix=pinning["server_prefix"]),
        lambda cell: f"{cell[0]} {'none' if cell[1] is None else f'/compute?ms={cell[1]}'}",
        lambda r: f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")
    data = experiment.document(
        "fairness", sys.argv[1:] if argv is None else argv, clock, pinning=pinning,
        settings={"quick": args.quick, "requests": requests, "clients": args.clients, "repeat": repeat,
                  "compute_ms": args.compute_ms, "seed": args.seed})
    data.update(rows=fold(records), runs=records, elapsed_s=clock.elapsed())
    text = render(data)
    experiment.finish(data, out, text, conclusion(data), extra={out.with_suffix(".txt"): text})
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: each server's p99 for fast requests beside the slow handler."""
    busy = {row["server"]: row["p99_ms"] for row in data["rows"]
            if row["background"] != "none" and row.get("p99_ms") is not None}
    return ("p99 of fast requests beside a slow handler: " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in busy.items())
            if busy else "fairness: nothing measured")


if __name__ == "__main__":
    sys.exit(main())
