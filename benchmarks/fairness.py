# benchmarks/fairness.py
"""How long does a fast request wait behind a slow one?  p50/p99 latency, measured.

    python -m benchmarks.fairness                   every server, with and without a compute load
    python -m benchmarks.fairness --quick           two servers, few requests: a look
    python -m benchmarks.fairness --profile callbacks,coroutines --reference     the book's profile.txt

Per row: a fresh server, ``--requests`` fast ``GET /`` from CLIENTS
keep-alive clients, each pausing 1 to 10 ms (seeded: a rerun sends the same
sequence), latency measured by the client from just before the send to the
end of the answer; in the rows with a background load one more client asks
``GET /compute?ms=50`` again and again.  The server runs on one CPU and the
clients on the other, but not at real-time priority: under SCHED_FIFO the
threaded server's waiting thread never got the core to ask for the GIL (p50
beside /compute 45 ms, not 4).  ``--profile``: benchmarks/harness/profiling.py.
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
from benchmarks.harness.process import choose_names, choose_pinning
from benchmarks.harness.profiling import profile_stage
from benchmarks.harness.render import align, describe_machine, number, spread_cell
from tinyloop.coroutines.server import COMPUTE_ENV
from tinyloop.testing import ServerProcess, recv_response

QUICK = {"servers": ["threaded", "coroutines"], "requests": 40}
FIGURES = ("requests", "p50_ms", "p99_ms", "max_ms", "computes")
TIMEOUT = 10.0  # seconds any one request may take before the row fails
CLIENTS, COMPUTE_MS, SEED = 4, 50, 1  # fast clients; the slow handler's CPU time; the pauses' seed

# label -> (stage, environment): a thread per connection (Part 0: the kernel preempts), and one
# thread, cooperative, with /compute run inline, in a thread pool, or giving the loop back every 1 ms
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


def measure(server: str, requests: int, compute_ms: int | None, prefix: Sequence[str] = ()) -> dict:
    """One run: start ``server`` (``prefix`` before its command), warm it up, run the fast clients
    (and the compute client), stop it.  Returns the run's record: ``server``, ``background``
    ("none" or "/compute?ms=N"), ``status`` ("ok", or "error" with a ``note``), and FIGURES:
    fast requests answered, their p50/p99/max latency in ms, /compute requests answered meanwhile."""
    stage, env = SERVERS[server]
    background = "none" if compute_ms is None else f"/compute?ms={compute_ms}"
    command = [*prefix, sys.executable, "-m", "tinyloop", "serve", stage, "--host", "127.0.0.1", "--port", "0"]
    with ServerProcess(stage, env=env, command=command) as proc:
        for _ in range(20):  # warm-up: imports, first connections, thread pool
            _fast_client(proc.address, 1, SEED, [])
        stop, computes = threading.Event(), [0]
        compute = threading.Thread(target=_compute_client, args=(proc.address, background, stop, computes),
                                   daemon=True)
        if compute_ms is not None:
            compute.start()
            time.sleep(0.1)  # the compute load is running before we measure
        latencies: list[list[float]] = [[] for _ in range(CLIENTS)]
        fast = [threading.Thread(target=_fast_client, daemon=True,
                                 args=(proc.address, requests // CLIENTS, SEED + i, latencies[i]))
                for i in range(CLIENTS)]
        for thread in fast:
            thread.start()
        for thread in fast:
            thread.join(TIMEOUT * requests)
        stop.set()
        if compute.is_alive():
            compute.join(TIMEOUT)
    samples = sorted(s for per_client in latencies for s in per_client)
    record = {"server": server, "background": background}
    if len(samples) < 2:
        return {**record, "status": "error", "note": f"only {len(samples)} requests were answered"}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {**record, "status": "ok", "requests": len(samples), "p50_ms": round(cuts[49] * 1e3, 2),
            "p99_ms": round(cuts[98] * 1e3, 2), "max_ms": round(samples[-1] * 1e3, 2), "computes": computes[0]}


def fold(records: list[dict]) -> list[dict]:
    """One row per (server, background), in run order: the harness's fold (medians, min-max, noisy on p99)."""
    folded = experiment.fold(records, "server", "background", FIGURES, deciding=("p99_ms",), ratios=())
    return [{"server": server, "stage": SERVERS[server][0], "env": SERVERS[server][1], "background": background,
             **{key: value for key, value in summary.items() if key != "ratio"}}
            for server, by_background in folded.items() for background, summary in by_background.items()]


def table(data: dict) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of ``data`` (this script's JSON), as the book's {bench-fairness} shows them."""
    header = ["server", "background load", "requests", "p50 ms", "p99 ms", "p99 min–max", "max ms",
              "computes"]
    rows = [[row["server"], "none" if row["background"] == "none" else f"1 client: GET {row['background']}",
             *([number(row["requests"]), number(row["p50_ms"], 2), number(row["p99_ms"], 2),
                spread_cell((row.get("spread") or {}).get("p99_ms"), row.get("noisy"), 2),
                number(row["max_ms"], 2), number(row["computes"])]
               if row.get("p99_ms") is not None else [row.get("note") or "failed", *[""] * 5])]
            for row in data["rows"]]
    return header, rows


def render(data: dict) -> str:
    """The rows of ``data`` (this script's JSON) as an aligned text table, with how it was measured."""
    settings = data["settings"]
    return "\n".join([*align(*table(data)), "",
                      f"{settings['clients']} fast keep-alive clients, {settings['requests']} GET / per run, "
                      "1-10 ms pauses; latency measured by the client.",
                      describe_machine(data)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("fairness", __doc__, pin=False)
    parser.add_argument("--servers", help=f"comma list from {', '.join(SERVERS)} (default: all; "
                                          f"--quick {','.join(QUICK['servers'])})")
    parser.add_argument("--requests", type=int,
                        help=f"fast requests per row (default 400; --quick {QUICK['requests']})")
    parser.add_argument("--profile", metavar="STAGES",
                        help="instead: profile these stages (comma list) under ab -k, by layer: profile.txt")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "fairness.json")
    pinning = choose_pinning(False)  # the server on one CPU, this process (the clients) on the other
    if args.profile:
        text = "\n".join(profile_stage(stage, args.requests or 2000, pinning["server_prefix"])
                         for stage in args.profile.split(","))
        return output.print_and_write(text, out.with_name("profile.txt"))
    chosen = choose_names(args.servers, [*SERVERS], "server", QUICK["servers"] if args.quick else [*SERVERS])
    pick = experiment.settings(parser, args, {"requests": 400, "repeat": 3}, {**QUICK, "repeat": 1})
    clock = experiment.Clock()
    records = experiment.interleave(
        [(name, compute_ms) for name in chosen for compute_ms in (None, COMPUTE_MS)], pick["repeat"],
        lambda cell: measure(cell[0], pick["requests"], cell[1], pinning["server_prefix"]),
        lambda cell: f"{cell[0]} {'none' if cell[1] is None else f'/compute?ms={cell[1]}'}",
        lambda r: f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")
    settings = {"quick": args.quick, **pick, "clients": CLIENTS, "compute_ms": COMPUTE_MS, "seed": SEED}
    data = experiment.document("fairness", argv, clock, pinning=pinning, settings=settings,
                               rows=fold(records), runs=records)
    return experiment.conclude(data, out, clock, render, conclusion)


def conclusion(data: dict) -> str:
    """The run in one line: each server's p99 for fast requests beside the slow handler."""
    return experiment.sentence("p99 of fast requests beside a slow handler", [
        f"{row['server']} {row['p99_ms']:.1f} ms" for row in data["rows"]
        if row["background"] != "none" and row.get("p99_ms") is not None])


if __name__ == "__main__":
    sys.exit(main())
