# benchmarks/echo.py
"""TCP echo on every loop, in the shape of the uvloop announcement's benchmark.

    python -m benchmarks.echo                  every server, 1, 10 and 100 KiB, 3 repetitions
    python -m benchmarks.echo --quick          a smoke run: short, 1 repetition
    python -m benchmarks.echo --servers asyncio-protocol,aio-protocol --sizes 1
    python -m benchmarks.echo --list           what can run here, and why not the rest
    python -m benchmarks.echo --reference      maintainers: the book's benchmarks/results/echo.json

A C client (peers/c/echo_client.c) against one program on every Python loop
(peers/echo_server.py --loop --api) and Go, Node and C peers; benchmarks/README.md says what
each figure is and how to read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from benchmarks import servers
from benchmarks.harness import experiment, output, render
from benchmarks.harness.machine import display
from benchmarks.harness.process import CPU_SOURCE, choose_names, cpu_seconds
from benchmarks.peers.echo_server import APIS, LOOPS, loop_factory
from benchmarks.servers import BUILD, PEER_DIR, Server

BASELINE = servers.BASELINE
SIZES_KIB = (1, 10, 100)
CONNECTIONS = 10
DEFAULTS = {"duration": 1.5, "warmup": 0.5, "repeat": 3, "timeout": 5.0}
QUICK = {"duration": 0.3, "warmup": 0.1, "repeat": 1, "timeout": 2.0}


_API = {"protocol": "an asyncio.Protocol", "streams": "start_server streams"}


def _loop_peer(loop: str, api: str) -> Server:
    """peers/echo_server.py on ``loop`` with ``api``; skipped unless the loop's factory imports."""
    module = LOOPS[loop].partition(":")[0]
    setup = partial(servers.import_note, f"Python module {module}", partial(loop_factory, loop))
    if loop == "ring":  # it imports anywhere, and runs only where io_uring is allowed
        setup = partial(_ring_note, setup)
    return Server(f"{loop}-{api}", "peer", f"{_API[api]} on {loop}",
                  servers.peer_argv("echo_server.py", "--loop", loop, "--api", api),
                  needs=None if loop == "asyncio" else f"module:{module}", setup=setup)


def _ring_note(imports) -> str | None:
    """Why tinyloop.ring cannot run here (it does not import, or io_uring is not allowed), or None."""
    from tinyloop.raw import uring
    return imports() or uring.unavailable()


# The rows: every loop of echo_server.LOOPS with each API, then the peers.
PEERS: tuple[Server, ...] = (
    *(_loop_peer(loop, api) for loop in LOOPS for api in APIS),
    servers.go_peer("go", "Go, a goroutine per connection", "echo-go", "./echo"),
    Server("node", "peer", "Node.js net, socket.pipe(socket)", servers.peer_argv("node/echo.js"), needs="node"),
    servers.c_peer("c-epoll", "the floor: a minimal C echo server on epoll, no interpreter", "echo_floor"),
    servers.c_peer("c-uring", "the completion floor: the same C echo on io_uring (liburing), multishot receive "
                   "on provided buffers, each sent back from its own buffer", "echo_uring_floor", libs=("uring",),
                   check=servers.uring_note),
)
_PEERS = {peer.name: peer for peer in PEERS}

# Every run's and summary's figures; the first two decide whether a row is noisy.
FIGURES = ("msgs_per_s", "cpu_us_per_msg", "mib_per_s", "server_busy", "p50_us", "p99_us",
           "client_cpu_us_per_msg")
CLIENT = BUILD / "echo_client"


def prepare_client() -> str | None:
    """Build the load generator (servers.build_c); None on success, else why not."""
    return servers.build_c(CLIENT, PEER_DIR / "c" / "echo_client.c")


@dataclass(frozen=True)
class Settings:
    """``duration`` and ``warmup`` in seconds per run; ``timeout``: seconds
    without a completed message before the client gives up."""

    duration: float
    warmup: float
    timeout: float
    connections: int = CONNECTIONS


def client_command(port: int, size: int, seconds: float, settings: Settings,
                   client: Path = CLIENT) -> list[str]:
    return [str(client), "--port", str(port), "--size", str(size), "--connections", str(settings.connections),
            "--duration", f"{seconds:g}", "--timeout", f"{settings.timeout:g}"]


def parse_client(text: str) -> dict[str, float] | None:
    """The client's ``key=value`` line as numbers, or None when there is none.

    ``"messages=10 bytes=10240 seconds=1.0 errors=0 timeout=0 p50_us=80.0 p99_us=120.5"``
    -> ``{"messages": 10.0, "bytes": 10240.0, ...}`` (p50/p99 are -1 without samples).
    """
    for line in reversed(text.strip().splitlines()):
        if line.startswith("messages="):
            try:
                return {key: float(value) for key, _, value in (word.partition("=") for word in line.split())}
            except ValueError:
                return None
    return None


def measure(server: Server, size: int, settings: Settings, pinning: dict) -> dict:
    """Start ``server``, warm it up, put the echo load on it for ``settings.duration``, stop it;
    returns the run's record, ``status`` ``"ok"``, ``"timeout"`` (no echo for ``settings.timeout``
    seconds) or ``"error"`` (no start, a death, a failed connection, a wrong byte), and a ``note``."""
    record: dict = {"server": server.name, "size": size, "status": "error", "note": None,
                    **dict.fromkeys(("messages", "seconds", "errors", "cpu_s", *FIGURES))}
    process, failure = servers.start(server, pinning["server_prefix"])
    if failure is not None:
        record["status"], record["note"] = failure
        return record

    def client_run(seconds: float) -> tuple[dict[str, float] | None, int | None, str]:
        argv = [*pinning["load_prefix"], *client_command(process.port, size, seconds, settings)]
        code, text = experiment.run_tool(argv, seconds + settings.timeout + 10)
        return parse_client(text) if code == 0 else None, code, text

    try:
        warm, _, text = client_run(settings.warmup)
        if warm is None or not warm["messages"]:
            record["status"] = "timeout" if warm is not None else "error"
            record["note"] = f"warm-up: no echo ({text.strip().splitlines()[-1:] or 'no output'})"
            return record
        before = cpu_seconds(process)
        result, code, text = client_run(settings.duration)
        after = cpu_seconds(process)
        if result is None:
            tail = text.strip().splitlines()[-1:] or ["no output"]
            record["note"] = ("the client ran past its wall-clock limit" if code is None
                              else f"the client failed (exit code {code}): {tail[0]}")
            return record
        messages, seconds, errors = int(result["messages"]), result["seconds"], int(result["errors"])
        cpu = None if before is None or after is None else after - before
        record.update(messages=messages, seconds=seconds, errors=errors,
                      cpu_s=None if cpu is None else round(cpu, 6),
                      msgs_per_s=_per(messages, seconds), cpu_us_per_msg=_per(cpu, messages, 1e6),
                      mib_per_s=_per(result["bytes"], seconds, 2**-20), server_busy=_per(cpu, seconds),
                      p50_us=result["p50_us"] if result["p50_us"] >= 0 else None,
                      p99_us=result["p99_us"] if result["p99_us"] >= 0 else None,
                      client_cpu_us_per_msg=_per(result.get("cpu_s"), messages, 1e6))
        exit_code = process.proc.poll() if process.proc else None
        record["status"], record["note"] = (
            ("error", f"the server exited with code {exit_code} during the run") if exit_code is not None
            else ("error", f"{errors} of {settings.connections} connections failed "
                           "(closed, reset, or a wrong byte echoed)") if errors
            else ("timeout", f"no message came back for {settings.timeout:g} s")
            if result["timeout"] or not messages
            else ("ok", None))
        return record
    finally:
        process.stop()


def _per(value: float | None, count: float, scale: float = 1.0) -> float | None:
    """``value * scale / count``; None where ``value`` is None or ``count`` is 0."""
    return None if value is None or not count else value * scale / count


def summarize(records: list[dict], baseline: str | None = BASELINE) -> dict[str, dict[str, dict]]:
    """``{str(size): {server: summary}}``: the harness's one fold (experiment.fold);
    messages/s and CPU µs/message decide whether a row is noisy."""
    return experiment.fold(records, "size", "server", FIGURES, deciding=FIGURES[:2], baseline=baseline)


# The book's {bench-echo} calls table, notes and NOTES.
HEADER = ["server", "messages/s", "MiB/s", "CPU µs/msg", "server busy", "p50 µs", "p99 µs", "msg/s min–max"]
NOTES = {
    "ratio": "In parentheses: the figure divided by asyncio-protocol's at the same size, in the same run.",
    "cpu": ("CPU µs/msg: the server process's user + system CPU time during the run, divided by the "
            "messages echoed. Lower is better. server busy: that CPU time per second of the run; near "
            "1 the server set the pace, well under 1 it waited (for its core, or for the client), and "
            "messages/s is then not the server's figure: compare loops by CPU µs/msg."),
    "noisy": ("noisy: the repetitions' messages/s or CPU µs/msg differ by more than 25% (the largest "
              "is over 1.25 times the smallest), so the median is a weak figure."),
}


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def table(data: dict, size: int) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` for one message size (bytes), in the run's server order; a failed or skipped
    row says so in its figures' place, ``*`` marks a partial one.  ``KeyError``: no such size."""
    by_server = data["results"][str(size)]
    rows = []
    for entry in data["servers"]:
        name, row = entry["name"], by_server.get(entry["name"])
        if entry.get("skipped") or row is None or row["ok_runs"] == 0:
            if entry.get("skipped") or row is not None:
                rows.append([name, "skipped" if entry.get("skipped") else row["status"],
                             *[render.DASH] * (len(HEADER) - 2)])
            continue
        ratio = row["ratio"] if data.get("baseline") is not None else {}
        busy = row.get("server_busy")
        rows.append([name + ("*" if row["status"] == "partial" else ""),
                     render.cell(row["msgs_per_s"], 0, ratio.get("msgs_per_s")), render.number(row["mib_per_s"], 1),
                     render.cell(row["cpu_us_per_msg"], 1, ratio.get("cpu_us_per_msg")),
                     render.DASH if busy is None else f"{busy:.2f}",
                     render.number(row["p50_us"]), render.number(row["p99_us"]),
                     render.spread_cell(row["spread"]["msgs_per_s"], bool(row["noisy"]))])
    return HEADER, rows


def notes(data: dict) -> list[str]:
    """The lines under the tables: what skipped or failed, and why."""
    out = [f"{s['name']}: skipped, {s['skipped']}" for s in data["servers"] if s.get("skipped")]
    for size, by_server in data["results"].items():
        out += [f"{name} at {_size_label(int(size))}: {row['note']}"
                for name, row in by_server.items() if row["note"]]
    return out


def format_text(data: dict) -> str:
    """Every size's table as aligned text, with the notes and the machine."""
    parts = [f"echo, {_size_label(size)} messages, {data['settings']['connections']} connections\n"
             + "\n".join(render.align(*table(data, size))) for size in data["settings"]["sizes"]]
    lines = [*notes(data), *NOTES.values(), "Measured on: " + render.describe_machine(data)]
    return "\n\n".join(parts) + "\n\n" + "\n".join(lines)


def conclusion(data: dict) -> str:
    """The run in one line: at the smallest size, the least server CPU per message, against the baseline's."""
    if not data["results"]:
        return "echo: nothing measured"
    size = min(data["results"], key=int)
    least = experiment.least({name: row.get("cpu_us_per_msg") for name, row in data["results"][size].items()},
                             data.get("baseline"), 1)
    return f"echo {_size_label(int(size))}: " + (f"least server CPU per message: {least}" if least
                                                 else "nothing measured")


def _sizes(argument: str) -> list[int]:
    """``"1,10,100"`` (KiB) -> bytes, for argparse."""
    sizes = [int(float(part) * 1024) for part in argument.split(",") if part.strip()]
    if not sizes or min(sizes) < 1:
        raise ValueError(argument)
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("echo", __doc__, repeat=DEFAULTS["repeat"])
    parser.add_argument("--servers", help=f"comma list, 'all' (default) or 'none': {', '.join(_PEERS)}")
    parser.add_argument("--sizes", type=_sizes, default=[kib * 1024 for kib in SIZES_KIB],
                        help="message sizes in KiB, comma list (default 1,10,100)")
    parser.add_argument("--duration", type=float, help=f"seconds per run (default {DEFAULTS['duration']:g})")
    parser.add_argument("--warmup", type=float,
                        help=f"seconds of unmeasured echo first (default {DEFAULTS['warmup']:g})")
    parser.add_argument("--connections", type=int, default=CONNECTIONS,
                        help=f"concurrent connections, 1 to 1024 (default {CONNECTIONS})")
    parser.add_argument("--timeout", type=float,
                        help=f"seconds without an echo before a run fails (default {DEFAULTS['timeout']:g})")
    parser.add_argument("--list", action="store_true", help="list the servers, whether each can run, and exit")
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "echo.json")
    pick = experiment.settings(parser, args, DEFAULTS, QUICK)
    if not 1 <= args.connections <= 1024:
        parser.error(f"--connections must be 1 to 1024, got {args.connections}")
    settings = Settings(pick["duration"], pick["warmup"], pick["timeout"], args.connections)
    repeat = int(pick["repeat"])
    candidates = [_PEERS[name] for name in choose_names(args.servers, list(_PEERS), "server", list(_PEERS))]
    ready, skipped = experiment.prepared(candidates, servers.prepare, None if args.list else "echo")
    client_note = prepare_client()
    if args.list:
        print(f"client  echo_client       {'skipped: ' + client_note if client_note else 'ready'}")
        print(*(server.status(skipped.get(server.name)) for server in candidates), sep="\n")
        return 0
    if client_note:
        raise SystemExit(f"echo: the load generator is not ready: {client_note}")
    pinning = experiment.pinning(args)
    width = max(len(server.name) for server in ready)
    clock = experiment.Clock()
    records = experiment.interleave(
        [(size, server) for size in args.sizes for server in ready], repeat,
        lambda cell: measure(cell[1], cell[0], settings, pinning),
        lambda cell: f"{cell[1].name:<{width}} {_size_label(cell[0]):>7}",
        lambda r: f"{r['msgs_per_s']:.0f} msg/s, cpu {r['cpu_us_per_msg'] or 0:.1f} µs/msg, "
                  f"busy {r['server_busy'] or 0:.2f}")
    baseline = BASELINE if any(s.name == BASELINE for s in ready) else None
    client = display(client_command(0, 1024, settings.duration, settings, Path("echo_client")))
    client = client.replace("--port 0", "--port PORT").replace("--size 1024", "--size BYTES")
    data = experiment.document(
        "echo", argv, clock, pinning=pinning,
        tools={**servers.tool_versions(), "echo_client": "benchmarks/peers/c/echo_client.c"},
        settings={"quick": args.quick, "repeat": repeat, "duration_s": settings.duration,
                  "warmup_s": settings.warmup, "timeout_s": settings.timeout,
                  "connections": settings.connections, "sizes": args.sizes, "cpu_source": CPU_SOURCE,
                  "order": "interleaved: each repetition runs every size on every server; a fresh server "
                           "process per run, warmed up first; figures are medians over repetitions"},
        baseline=baseline, client=client,
        servers=[server.entry(skipped.get(server.name)) for server in candidates],
        runs=records, results=summarize(records, baseline))
    return experiment.conclude(data, out, clock, format_text, conclusion, None, keep_copy=True)


if __name__ == "__main__":
    raise SystemExit(main())
