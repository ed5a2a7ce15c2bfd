# benchmarks/echo.py
"""TCP echo on every loop, in the shape of the uvloop announcement's benchmark.

    python benchmarks/echo.py                  every server, 1, 10 and 100 KiB, 3 repetitions
    python benchmarks/echo.py --quick          a smoke run: short, 1 repetition
    python benchmarks/echo.py --servers asyncio-protocol,aio-protocol --sizes 1
    python benchmarks/echo.py --list           what can run here, and why not the rest
    python benchmarks/echo.py --reference           refresh the book's reference, benchmarks/results/echo.json

Ten connections (--connections), each sending one message and waiting for
the whole echo before it sends the next, for a fixed time per run.  Per
server and message size: messages/s, MiB/s (echoed bytes, one direction),
the server's CPU µs per message, p50/p99 round trip in µs, each figure's
ratio to asyncio-protocol in the same run, and the spread of the repetitions.

A user's run writes benchmarks/results/local/echo.json (ignored by git, with a
timestamped copy in local/runs/); only --reference writes the committed
benchmarks/results/echo.json that the book renders ({bench-echo}).
"""

# Rules this file keeps (the HTTP harness's, benchmarks/run.py, whose
# helpers it imports rather than copies):
#
#   * The same program on every Python loop.  The six Python rows run
#     benchmarks/peers/echo_server.py with --loop and --api, so between them
#     only the loop and the API change.  Go, Node and a C server on epoll
#     (the floor) stand beside them, each built offline from its standard
#     library; a server that cannot run here is skipped with a note.
#   * The load generator is C (benchmarks/peers/c/echo_client.c): one thread
#     on epoll, cheaper per message than any server here, so on two cores
#     the server, pinned to one, is what saturates, and messages/s is the
#     server's figure as much as CPU per message is.
#   * Repetitions are interleaved (repetition 1 runs every size on every
#     server, then repetition 2...), each run on a fresh server process that
#     the client first warms up, unmeasured.  Figures are medians of the
#     repetitions that succeeded; ``spread`` is their [min, max], and a row
#     whose largest messages/s or CPU µs/message is more than 1 + NOISE
#     times its smallest is flagged ``noisy``.
#   * Nothing hangs: the client gives up after --timeout seconds without a
#     completed message, runs under a wall-clock limit, and servers are
#     stopped in ``finally`` blocks.

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: make ``benchmarks`` importable

from benchmarks import report, servers  # noqa: E402
from benchmarks.harness.machine import display, fingerprint  # noqa: E402
from benchmarks.harness import output  # noqa: E402
from benchmarks.harness.output import RESULTS, minutes, relative, write_json  # noqa: E402
from benchmarks.harness.process import choose_names, choose_pinning, cpu_seconds  # noqa: E402
from benchmarks.harness.summary import NOISE, is_noisy, median  # noqa: E402
from benchmarks.servers import BUILD, PEER_DIR, Peer, Server  # noqa: E402
from benchmarks.peers.echo_server import APIS, LOOPS, loop_factory  # noqa: E402

__all__ = ["BASELINE", "FIGURES", "PEERS", "Plan", "measure", "parse_client", "results_json",
           "summarize", "table", "format_text", "main"]

SCHEMA = 1
REFERENCE = RESULTS / "echo.json"          # the book's, committed; only --reference writes it
LOCAL = RESULTS / "local" / "echo.json"    # a user's run: ignored by git

BASELINE = "asyncio-protocol"
SIZES_KIB = (1, 10, 100)
CONNECTIONS = 10

# Sized so that the default run (9 servers x 3 sizes x 3 repetitions) takes
# about three and a half minutes on a 2-core machine.
DEFAULTS = {"duration": 1.5, "warmup": 0.5, "repeat": 3, "timeout": 5.0}
QUICK = {"duration": 0.3, "warmup": 0.1, "repeat": 1, "timeout": 2.0}
_OVERHEAD_S = 0.5  # to start a server, connect, stop it

# Discussion: the Python rows come from echo_server.LOOPS, one row per loop
# and API, so a new loop there (Part IV's ``uv``) is measured here, and by
# micro.py, without another edit.  A row needs its factory's module.
_API_SUMMARY = {"protocol": "an asyncio.Protocol", "streams": "start_server streams"}
PYTHON_LOOPS = tuple(LOOPS)
PEERS: tuple[Peer, ...] = (
    *(Peer(f"{loop}-{api}", f"{_API_SUMMARY[api]} on {loop}"
           + (" (the baseline of every ratio)" if f"{loop}-{api}" == BASELINE else ""),
           None if loop == "asyncio" else f"module:{factory.partition(':')[0]}")
      for loop, factory in LOOPS.items() for api in APIS),
    Peer("go", "Go, a goroutine per connection, GOMAXPROCS=1", "go"),
    Peer("node", "Node.js net, socket.pipe(socket)", "node"),
    Peer("c-epoll", "the floor: a minimal C echo server on epoll, no interpreter", "cc"),
)
_PEERS = {peer.name: peer for peer in PEERS}

# The figures every run and summary carries (units in the names).  The
# client's own CPU per message is there to show it kept up: it should stay
# well below the server's.
FIGURES = ("msgs_per_s", "mib_per_s", "cpu_us_per_msg", "p50_us", "p99_us", "client_cpu_us_per_msg")
_NOISE_FIGURES = ("msgs_per_s", "cpu_us_per_msg")

CLIENT = BUILD / "echo_client"
_GO_ENV = {"GOCACHE": str(BUILD / "gocache"), "GOPATH": str(BUILD / "gopath"),
           "GOTOOLCHAIN": "local", "GOFLAGS": "", "CGO_ENABLED": "0"}


# --- the servers ------------------------------------------------------------

def echo_server(name: str) -> Server:
    """The Server for echo peer ``name``; raises ``KeyError`` for an unknown name."""
    summary = _PEERS[name].summary
    if name.partition("-")[0] in PYTHON_LOOPS:
        loop, _, api = name.partition("-")
        return Server(name, "peer", summary, (sys.executable, str(PEER_DIR / "echo_server.py"),
                                              "--loop", loop, "--api", api, "--port", "0"))
    if name == "go":
        return Server(name, "peer", summary, (str(BUILD / "echo-go"), "-port", "0"), env={"GOMAXPROCS": "1"})
    if name == "node":
        return Server(name, "peer", summary, ("node", str(PEER_DIR / "node" / "echo.js"), "--port", "0"))
    if name == "c-epoll":
        return Server(name, "peer", summary, (str(BUILD / "echo_floor"), "--port", "0"))
    raise KeyError(name)


def _cc(source: Path) -> Callable[[Path], list[str]]:
    """The compile command for one C file, as servers._build takes it."""
    return lambda out: [os.environ.get("CC", "cc"), "-O2", "-o", str(out), str(source)]


def prepare(peer: Peer) -> str | None:
    """Make ``peer`` ready to start: None if it is, else a note saying why not."""
    loop, _, api = peer.name.partition("-")
    if (peer.needs or "").startswith("module:") or (loop in LOOPS and api in APIS):
        module = peer.needs.partition(":")[2] if peer.needs else LOOPS[loop].partition(":")[0]
        try:
            importlib.import_module(module)
            if loop in LOOPS:
                loop_factory(loop)  # the factory itself, not only its package, must import
        except Exception as error:  # noqa: BLE001 - any failure means "skip, and say why"
            return f"Python module {module} does not import ({type(error).__name__}: {error})"
        return None
    if peer.needs and shutil.which(peer.needs) is None:
        return f"{peer.needs} is not on PATH"
    if peer.name == "go":
        return servers.build(BUILD / "echo-go", [PEER_DIR / "go" / "echo" / "main.go", PEER_DIR / "go" / "go.mod"],
                              lambda out: ["go", "build", "-o", str(out), "./echo"], cwd=PEER_DIR / "go",
                              env=_GO_ENV)
    if peer.name == "c-epoll":
        source = PEER_DIR / "c" / "echo_floor.c"
        return servers.build(BUILD / "echo_floor", [source], _cc(source))
    return None


def prepare_client() -> str | None:
    """Build the load generator; None on success, else why not."""
    if shutil.which(os.environ.get("CC", "cc")) is None and not CLIENT.exists():
        return "no C compiler (cc) to build benchmarks/peers/c/echo_client.c"
    source = PEER_DIR / "c" / "echo_client.c"
    return servers.build(CLIENT, [source], _cc(source))


# --- one run ------------------------------------------------------------

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


def parse_client(output: str) -> dict[str, float] | None:
    """The client's ``key=value`` line as numbers, or None when there is none.

    ``"messages=10 bytes=10240 seconds=1.0 errors=0 timeout=0 p50_us=80.0 p99_us=120.5"``
    -> ``{"messages": 10.0, "bytes": 10240.0, ...}`` (p50/p99 are -1 without samples).
    """
    for line in reversed(output.strip().splitlines()):
        if line.startswith("messages="):
            try:
                return {key: float(value) for key, _, value in
                        (word.partition("=") for word in line.split())}
            except ValueError:
                return None
    return None


def _client(argv: list[str], prefix: list[str], limit: float) -> tuple[int | None, str]:
    """Run the client; ``(exit code or None on the wall-clock limit, its output)``."""
    try:
        done = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout or b""
        return None, out.decode() if isinstance(out, bytes) else out
    return done.returncode, done.stdout + done.stderr


def measure(server: Server, size: int, settings: Settings, pinning: dict, client: Path = CLIENT) -> dict:
    """Start ``server``, warm it up, put the echo load on it for ``settings.duration``, stop it.

    Returns the run's record: ``status`` is ``"ok"``, ``"timeout"`` (no
    message came back for ``settings.timeout`` seconds, or none at all) or
    ``"error"`` (the server did not start or died, a connection failed, an
    echo came back wrong); ``note`` says what happened.
    """
    record: dict = {"server": server.name, "size": size, "status": "error", "note": None,
                    "messages": None, "seconds": None, "errors": None, "cpu_s": None,
                    **{figure: None for figure in FIGURES}}
    try:
        process = servers.launch(server, pinning["server_prefix"])
    except RuntimeError as error:
        record["note"] = "did not start: " + " | ".join(str(error).strip().splitlines()[:3])
        return record
    limit = settings.timeout + 10
    try:
        code, output = _client(client_command(process.port, size, settings.warmup, settings, client),
                               pinning["load_prefix"], settings.warmup + limit)
        warm = parse_client(output) if code == 0 else None
        if warm is None or not warm["messages"]:
            record["status"] = "timeout" if warm is not None else "error"
            record["note"] = f"warm-up: no echo ({output.strip().splitlines()[-1:] or 'no output'})"
            return record
        before = cpu_seconds(process)
        code, output = _client(client_command(process.port, size, settings.duration, settings, client),
                               pinning["load_prefix"], settings.duration + limit)
        after = cpu_seconds(process)
        result = parse_client(output) if code == 0 else None
        if result is None:
            tail = output.strip().splitlines()[-1:] or ["no output"]
            record["note"] = (f"the client ran past its limit of {settings.duration + limit:g} s" if code is None
                              else f"the client failed (exit code {code}): {tail[0]}")
            return record
        messages, seconds = int(result["messages"]), result["seconds"]
        record.update(messages=messages, seconds=seconds, errors=int(result["errors"]),
                      p50_us=result["p50_us"] if result["p50_us"] >= 0 else None,
                      p99_us=result["p99_us"] if result["p99_us"] >= 0 else None)
        if seconds > 0:
            record["msgs_per_s"] = messages / seconds
            record["mib_per_s"] = result["bytes"] / seconds / 2**20
        if before is not None and after is not None:
            record["cpu_s"] = round(after - before, 6)
            if messages:
                record["cpu_us_per_msg"] = (after - before) * 1e6 / messages
        if messages and "cpu_s" in result:
            record["client_cpu_us_per_msg"] = result["cpu_s"] * 1e6 / messages
        exit_code = process.proc.poll() if process.proc else None
        if exit_code is not None:
            record["note"] = f"the server exited with code {exit_code} during the run"
        elif result["errors"]:
            record["note"] = (f"{int(result['errors'])} of {settings.connections} connections failed "
                              "(closed, reset, or a wrong byte echoed)")
        elif result["timeout"] or not messages:
            record["status"] = "timeout"
            record["note"] = f"no message came back for {settings.timeout:g} s"
        else:
            record["status"] = "ok"
        return record
    finally:
        process.stop()


# --- medians, spreads and ratios -------------------------------------------

def summarize(records: list[dict], baseline: str | None = BASELINE) -> dict[str, dict[str, dict]]:
    """Fold run records into ``{str(size): {server: summary}}``.

    A summary holds each of FIGURES as the median over its ``"ok"`` runs;
    ``spread`` maps each figure to ``[min, max]`` over those runs (None
    without any); ``noisy`` lists the figures among msgs_per_s and
    cpu_us_per_msg whose spread is wider than NOISE (two ok runs or
    more); ``ratio`` divides each figure by the ``baseline`` server's at the
    same size (None where either is missing).  ``status`` is ``"ok"`` when
    every run was, the failures' status when none was, else ``"partial"``.
    """
    grouped: dict[str, dict[str, list[dict]]] = {}
    for record in records:
        grouped.setdefault(str(record["size"]), {}).setdefault(record["server"], []).append(record)
    results: dict[str, dict[str, dict]] = {}
    for size, by_server in grouped.items():
        rows: dict[str, dict] = {}
        for name, runs in by_server.items():
            ok = [r for r in runs if r["status"] == "ok"]
            failed = [r for r in runs if r["status"] != "ok"]
            row: dict = {"runs": len(runs), "ok_runs": len(ok)}
            row.update({figure: median([r[figure] for r in ok]) for figure in FIGURES})
            values = {figure: [r[figure] for r in ok if r[figure] is not None] for figure in FIGURES}
            row["spread"] = {figure: [min(v), max(v)] if v else None for figure, v in values.items()}
            row["noisy"] = [figure for figure in _NOISE_FIGURES
                            if len(ok) >= 2 and is_noisy(row["spread"][figure])]
            if not failed:
                row["status"], row["note"] = "ok", None
            else:
                row["status"] = "partial" if ok else failed[0]["status"]
                notes = sorted({r["note"] for r in failed if r["note"]})
                row["note"] = f"{len(failed)} of {len(runs)} runs failed" + (f": {'; '.join(notes)}" if notes else "")
            rows[name] = row
        base = rows.get(baseline) if baseline else None
        for row in rows.values():
            row["ratio"] = {figure: row[figure] / base[figure]
                            if base and row[figure] is not None and base[figure] else None
                            for figure in FIGURES}
        results[size] = rows
    return results


# --- the whole run ------------------------------------------------------

@dataclass
class Plan:
    """What one invocation measures, decided before anything starts."""

    candidates: list[Server]   # every server asked for, in table order
    skipped: dict[str, str]    # name -> why it cannot run here
    sizes: list[int]           # bytes
    settings: Settings
    repeat: int
    quick: bool

    @property
    def ready(self) -> list[Server]:
        return [server for server in self.candidates if server.name not in self.skipped]

    def runs(self) -> list[tuple[int, int, Server]]:
        """``(rep, size, server)`` in the order they run: interleaved repetitions."""
        return [(rep, size, server) for rep in range(1, self.repeat + 1)
                for size in self.sizes for server in self.ready]

    def estimate_seconds(self) -> float:
        per_run = _OVERHEAD_S + self.settings.warmup + self.settings.duration
        return per_run * len(self.runs())


def _sizes(argument: str | None) -> list[int]:
    """``"1,10,100"`` (KiB) -> bytes; None -> the announcement's three sizes."""
    if argument is None:
        return [kib * 1024 for kib in SIZES_KIB]
    try:
        sizes = [int(float(part) * 1024) for part in argument.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"echo.py: --sizes takes KiB as a comma list, like 1,10,100; got {argument!r}") from None
    if not sizes or min(sizes) < 1:
        raise SystemExit("echo.py: --sizes must name at least one size of 1 byte or more")
    return sizes


def make_plan(args: argparse.Namespace) -> Plan:
    """Check the command line, and get every server ready (building peers)."""
    base = QUICK if args.quick else DEFAULTS
    known = list(_PEERS)
    names = choose_names(args.servers, known, "server", known)

    def pick(given: float | None, key: str, flag: str, least: float) -> float:
        value = base[key] if given is None else given
        if value < least:
            raise SystemExit(f"echo.py: {flag} must be at least {least:g}, got {value:g}")
        return value

    connections = CONNECTIONS if args.connections is None else args.connections
    if not 1 <= connections <= 1024:
        raise SystemExit(f"echo.py: --connections must be from 1 to 1024, got {connections}")
    settings = Settings(duration=pick(args.duration, "duration", "--duration", 0.1),
                        warmup=pick(args.warmup, "warmup", "--warmup", 0.05),
                        timeout=pick(args.timeout, "timeout", "--timeout", 0.1), connections=connections)
    candidates = [echo_server(name) for name in names]
    skipped = {name: note for name in names if (note := prepare(_PEERS[name]))}
    return Plan(candidates, skipped, _sizes(args.sizes), settings,
                int(pick(args.repeat, "repeat", "--repeat", 1)), args.quick)


def _progress(index: int, total: int, rep: int, record: dict, width: int) -> str:
    """``[ 7/81] rep 1 aio-protocol   1 KiB ... 15210 msg/s 14.9 MiB/s cpu 62.1 µs/msg``"""
    head = (f"[{index:>{len(str(total))}}/{total}] rep {rep} {record['server']:<{width}} "
            f"{_size_label(record['size']):>7} ...")
    if record["status"] != "ok":
        return f"{head} {record['status'].upper()}: {record['note']}"
    cpu = f" cpu {record['cpu_us_per_msg']:.1f} µs/msg" if record["cpu_us_per_msg"] is not None else ""
    return f"{head} {record['msgs_per_s']:.0f} msg/s {record['mib_per_s']:.1f} MiB/s{cpu}"


def execute(plan: Plan, pinning: dict, client: Path = CLIENT, echo: bool = True) -> list[dict]:
    """Run the plan, printing a progress line per run (unless not ``echo``); return the records."""
    order = plan.runs()
    width = max(len(server.name) for server in plan.ready)
    records = []
    for index, (rep, size, server) in enumerate(order, 1):
        record = {"rep": rep, **measure(server, size, plan.settings, pinning, client)}
        records.append(record)
        if echo:
            print(_progress(index, len(order), rep, record, width), flush=True)
    return records


def results_json(plan: Plan, pinning: dict, records: list[dict], command: list[str],
                 date: datetime, elapsed: float) -> dict:
    """The JSON the book's {bench-echo} and this module's table() read.

    Keys: schema, date, command, machine (fingerprint()), tools, pinning,
    settings {quick, repeat, duration_s, warmup_s, timeout_s, connections,
    sizes, noise, cpu_source, order}, baseline, client (the load generator's
    command), servers [{name, kind, summary, command, env, skipped}], runs
    [records as measure() returns them, with rep], results (summarize()),
    elapsed_s.
    """
    baseline = BASELINE if any(s.name == BASELINE for s in plan.ready) else None
    settings = plan.settings
    return {
        "schema": SCHEMA,
        "date": date.isoformat(timespec="seconds"),
        "command": display(["python", "benchmarks/echo.py", *command]),
        "machine": fingerprint(),
        "tools": {**servers.tool_versions(), "echo_client": "benchmarks/peers/c/echo_client.c"},
        "pinning": {key: value for key, value in pinning.items() if not key.endswith("_prefix")},
        "settings": {
            "quick": plan.quick, "repeat": plan.repeat, "duration_s": settings.duration,
            "warmup_s": settings.warmup, "timeout_s": settings.timeout,
            "connections": settings.connections, "sizes": plan.sizes, "noise": NOISE,
            "cpu_source": ("the process's CPU-time clock, clock_gettime((~pid << 3) | 2)"
                           if sys.platform == "linux" else "/proc/PID/stat utime + stime, or none"),
            "order": "interleaved: each repetition runs every size on every server; a fresh server "
                     "process per run, warmed up first; figures are medians over repetitions",
        },
        "baseline": baseline,
        "client": display(client_command(0, 1024, settings.duration, settings, Path("echo_client"))
                               ).replace("--port 0", "--port PORT").replace("--size 1024", "--size BYTES"),
        "servers": [{"name": s.name, "kind": s.kind, "summary": s.summary, "command": display(s.argv),
                     "env": s.env or None, "skipped": plan.skipped.get(s.name)} for s in plan.candidates],
        "runs": records,
        "results": summarize(records, baseline),
        "elapsed_s": round(elapsed, 1),
    }


# --- tables -------------------------------------------------------------

HEADER = ["server", "messages/s", "MiB/s", "CPU µs/msg", "p50 µs", "p99 µs", "msg/s min–max"]
NOTES = {
    "ratio": "In parentheses: the figure divided by asyncio-protocol's at the same size, in the same run.",
    "cpu": ("CPU µs/msg: the server process's user + system CPU time during the run, divided by the "
            "messages echoed. Lower is better."),
    "noisy": ("noisy: the repetitions' messages/s or CPU µs/msg differ by more than 25% (the largest "
              "is over 1.25 times the smallest), so the median is a weak figure."),
}


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def _number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _cell(row: dict, figure: str, digits: int, ratios: bool) -> str:
    text = _number(row[figure], digits)
    ratio = row["ratio"].get(figure)
    return f"{text} ({ratio:.2f}×)" if ratios and ratio is not None and row[figure] is not None else text


def table(data: dict, size: int) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` for one message size, in the run's server order.

    A row that failed says how in its figures' place; a skipped server says
    "skipped"; a noisy row has "noisy" after its spread.  Raises ``KeyError``
    when the run has no results at ``size`` (bytes).
    """
    by_server = data["results"][str(size)]
    ratios = data.get("baseline") is not None
    rows = []
    for entry in data["servers"]:
        name = entry["name"]
        if entry.get("skipped"):
            rows.append([name, "skipped", *["—"] * (len(HEADER) - 2)])
            continue
        row = by_server.get(name)
        if row is None:
            continue
        if row["ok_runs"] == 0:
            rows.append([name, row["status"], *["—"] * (len(HEADER) - 2)])
            continue
        low_high = row["spread"]["msgs_per_s"]
        spread = f"{_number(low_high[0])}–{_number(low_high[1])}" if low_high else "—"
        if row["noisy"]:
            spread += " noisy"
        star = "*" if row["status"] == "partial" else ""
        rows.append([name + star, _cell(row, "msgs_per_s", 0, ratios), _number(row["mib_per_s"], 1),
                     _cell(row, "cpu_us_per_msg", 1, ratios), _number(row["p50_us"]),
                     _number(row["p99_us"]), spread])
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
    parts = []
    for size in data["settings"]["sizes"]:
        header, rows = table(data, size)
        title = f"echo, {_size_label(size)} messages, {data['settings']['connections']} connections"
        parts.append("\n".join([title, *report.align(header, rows)]))
    lines = notes(data) + [NOTES["ratio"], NOTES["cpu"], NOTES["noisy"]]
    return "\n\n".join(parts) + "\n\n" + "\n".join(lines) + "\nMeasured on: " + report.describe_machine(data)


# --- the command line --------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks/echo.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs, one repetition: a look, not a measurement")
    parser.add_argument("--servers", help=f"comma list, 'all' (default) or 'none': {', '.join(_PEERS)}")
    parser.add_argument("--sizes", help="message sizes in KiB, comma list (default 1,10,100)")
    parser.add_argument("--repeat", type=int, help=f"repetitions, interleaved (default {DEFAULTS['repeat']})")
    parser.add_argument("--duration", type=float, help=f"seconds per run (default {DEFAULTS['duration']:g})")
    parser.add_argument("--warmup", type=float, help=f"seconds of unmeasured echo first (default {DEFAULTS['warmup']:g})")
    parser.add_argument("--connections", type=int, help=f"concurrent connections (default {CONNECTIONS})")
    parser.add_argument("--timeout", type=float,
                        help=f"seconds without an echo before a run fails (default {DEFAULTS['timeout']:g})")
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and client to CPUs")
    output.add_arguments(parser, "echo.json")
    parser.add_argument("--list", action="store_true", help="list the servers, whether each can run, and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = output.json_path(parser, args, "echo.json")
    plan = make_plan(args)
    client_note = prepare_client()
    if args.list:
        print(f"client  echo_client       {'skipped: ' + client_note if client_note else 'ready'}")
        for server in plan.candidates:
            note = plan.skipped.get(server.name)
            print(f"peer    {server.name:<16}  {'skipped: ' + note if note else 'ready'}")
        return 0
    if client_note:
        raise SystemExit(f"echo.py: the load generator is not ready: {client_note}")
    for name, note in plan.skipped.items():
        print(f"skip {name}: {note}")
    if not plan.ready:
        raise SystemExit("echo.py: no server can run here")
    pinning = choose_pinning(args.no_pin)
    where = (f"server on CPU {pinning['server_cpus']}, client on CPU {pinning['load_cpus']}"
             if pinning["enabled"] else f"unpinned ({pinning['reason']})")
    print(f"echo: {len(plan.ready)} servers x {len(plan.sizes)} sizes x {plan.repeat} repetitions = "
          f"{len(plan.runs())} runs; {where}; estimate about {minutes(plan.estimate_seconds())}", flush=True)
    date, started = datetime.now(timezone.utc), time.monotonic()
    records = execute(plan, pinning)
    data = results_json(plan, pinning, records, sys.argv[1:] if argv is None else argv,
                        date, time.monotonic() - started)
    written = write_json(data, out, keep_copy=True)
    print()
    print(format_text(data))
    print(f"\nwrote {relative(written)} in {minutes(data['elapsed_s'])}")
    if written.resolve() == REFERENCE.resolve():
        print("this is the book's reference echo run now: commit benchmarks/results/echo.json")
    print(conclusion(data))
    return 0


def conclusion(data: dict) -> str:
    """The run in one line: at the smallest size, the server with the least CPU per message, against the baseline's."""
    if not data["results"]:
        return "echo: nothing measured"
    size = min(data["results"], key=int)
    rows = {name: row["cpu_us_per_msg"] for name, row in data["results"][size].items()
            if row.get("cpu_us_per_msg") is not None}
    if not rows:
        return f"echo {int(size) // 1024} KiB: nothing measured"
    best = min(rows, key=rows.get)
    base = data.get("baseline")
    against = f", {base} {rows[base]:.1f}" if base in rows else ""
    return f"echo {int(size) // 1024} KiB: least server CPU per message: {best} {rows[best]:.1f} µs{against}"


if __name__ == "__main__":
    raise SystemExit(main())
