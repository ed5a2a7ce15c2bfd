"""Part VI's race: tinyloop.ring against uv, uvloop and the two C floors, every load in one sitting.

    python -m benchmarks.race                writes benchmarks/results/local/race.*
    python -m benchmarks.race --quick        a smoke run (seconds, not a measurement)
    python -m benchmarks.race --reference    the completion chapter's table (benchmarks/results/race.*)
    python -m benchmarks.race --peers uringcore-protocol   another peer beside them

The question the completion chapter asks of ``tinyloop.ring``: does a
loop on io_uring, with Part III's Python layers, spend no more server CPU
per request than ``tinyloop.uv`` on a 1 KiB echo and on keep-alive HTTP,
and less on pipelined HTTP, where completion batches the most?  Each
measurement is the tool the book already uses for it, run here as a
process of its own (each pins its server and its load to separate CPUs,
interleaves the servers' repetitions and takes medians):

  echo       ``benchmarks.echo`` at 1 KiB, Protocol and streams: CPU µs per message
  http       ``benchmarks.run``: ab keep-alive, wrk keep-alive and wrk pipelined
             (depth 24), CPU µs per request
  syscalls   ``benchmarks.syscalls``: system calls per request under wrk at
             depth 1 and 24 (strace), where strace can count

and one table is written from their three JSON files (race.md), with each
goal read from the same run: met when ring's median is at or below uv's
(below, for pipelined), and said to be inside the noise when the two
ranges of repetitions overlap.  Beside each verdict, the two loops paired
by repetition: ring's run over uv's in the same repetition, which the tools
run one after the other, so a machine that slows down between repetitions
(a shared VM's neighbours) moves both and not the ratio; its median and
range, and in how many repetitions ring met the goal.  Every figure names
the command that made it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import experiment, output
from benchmarks.harness.summary import median
from benchmarks.harness.strace import strace_problem
from tinyloop.raw import uring

__all__ = ["GOALS", "ROWS", "main", "paired", "render", "server", "verdicts"]

# The rows: the loop raced, the loop it must match, the third-party loop on
# libuv, and the floors (the system calls alone, with no interpreter).
ECHO_SERVERS = ["ring-protocol", "uv-protocol", "uvloop-protocol", "ring-streams", "uv-streams",
                "uvloop-streams", "c-epoll", "c-uring"]
HTTP_STAGES = ["ring", "uv"]
HTTP_PEERS = ["uvloop-protocol", "c-epoll", "c-uring"]
HTTP_LOADS = ["ab-keepalive", "wrk", "wrk-pipeline"]
# ab's requests per repetition: benchmarks.run's 20,000 last about a third of a second of
# server CPU here, too short a window on a shared machine (repetitions of the same server
# differed by half); 60,000 take a second or so, as wrk's five seconds take a few.
AB_KEEPALIVE_REQUESTS = 60_000

# (column, the tool that measures it and the key of its results, "le" or "lt": the goal's
# comparison of ring's median with uv's)
GOALS = [
    ("echo 1 KiB, Protocol", ("echo", "1024"), "le"),
    ("echo 1 KiB, streams", ("echo", "1024"), "le"),
    ("ab keep-alive", ("http", "ab-keepalive"), "le"),
    ("wrk keep-alive", ("http", "wrk"), "le"),
    ("wrk pipelined, depth 24", ("http", "wrk-pipeline"), "lt"),
]

# A row of the table, and its server's names: in the echo run with a Protocol and with
# streams (None: it has no streams program), and in the HTTP runs.
ROWS = {"ring": ("ring-protocol", "ring-streams", "ring"), "uv": ("uv-protocol", "uv-streams", "uv"),
        "uvloop": ("uvloop-protocol", "uvloop-streams", "uvloop-protocol"),
        "c-epoll": ("c-epoll", None, "c-epoll"), "c-uring": ("c-uring", None, "c-uring")}


def server(names: tuple[str, str | None, str], column: str) -> str | None:
    """The server a column reads for a row of ``names`` (ROWS' shape)."""
    protocol, streams, http = names
    return {"echo 1 KiB, Protocol": protocol, "echo 1 KiB, streams": streams}.get(column, http)


def run_step(argv: list[str], log: Path) -> dict:
    """Run one tool (``python -m benchmarks.X ... --out FILE``), its output to ``log`` and to ours; its JSON.

    Raises RuntimeError, naming the command and the log, when it fails.
    """
    out = log.with_suffix(".json")
    command = [sys.executable, "-m", *argv, "--out", str(out)]
    print(f"\n=== {' '.join(['python', '-m', *argv])}", flush=True)
    with open(log, "w", encoding="utf-8") as sink:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            print(line, end="", flush=True)
    if proc.wait() != 0 or not out.exists():
        raise RuntimeError(f"{' '.join(argv)} failed (exit {proc.returncode}); its output: {log}")
    return json.loads(out.read_text(encoding="utf-8"))


def cell(results: dict, group: str, name: str | None, figure: str) -> dict | None:
    """``{"median", "low", "high"}`` of one figure of one server, or None where it did not run."""
    row = results.get(group, {}).get(name) if name else None
    if not row or row.get(figure) is None:
        return None
    low, high = row.get("spread", {}).get(figure, [row[figure], row[figure]])
    return {"median": row[figure], "low": low, "high": high}


def figures(echo: dict, http: dict, counted: dict | None, peers: list[str] = ()) -> dict:
    """The table's numbers, by row and column, from the three tools' JSON (``peers``: rows more)."""
    table: dict[str, dict] = {}
    for row, names in [*ROWS.items(), *((peer, (peer, None, peer)) for peer in peers)]:
        cells = {}
        for column, (tool, key), _ in GOALS:
            source, figure = (echo, "cpu_us_per_msg") if tool == "echo" else (http, "cpu_us_per_req")
            cells[column] = cell(source["results"], key, server(names, column), figure)
        for point in (counted or {}).get("points", []):
            if point["server"] == names[2] and point.get("per_request"):
                cells[f"syscalls, depth {point['depth']}"] = {"median": point["per_request"]["total"]}
        table[row] = cells
    return table


def paired(echo: dict, http: dict) -> dict:
    """Each goal's ring/uv ratio, paired by repetition: ``{column: {"median", "low", "high", "met", "pairs"}}``.

    Read from the tools' ``runs`` (one entry per server and repetition);
    ``met`` counts the repetitions in which ring met the goal against uv's
    run of the same repetition, ``pairs`` the repetitions in which both ran.
    A column with no pair is left out.
    """
    found = {}
    for column, (tool, key), comparison in GOALS:
        source, figure = (echo, "cpu_us_per_msg") if tool == "echo" else (http, "cpu_us_per_req")
        ring, uv = server(ROWS["ring"], column), server(ROWS["uv"], column)
        by_rep: dict[int, dict[str, float]] = {}
        for run in source.get("runs", []):
            measured = str(run.get("size")) if tool == "echo" else run.get("load")
            if measured == key and run.get("status") == "ok" and run.get(figure) and run["server"] in (ring, uv):
                by_rep.setdefault(run["rep"], {})[run["server"]] = run[figure]
        ratios = sorted(both[ring] / both[uv] for both in by_rep.values() if ring in both and uv in both)
        if not ratios:
            continue
        met = sum(ratio <= 1 if comparison == "le" else ratio < 1 for ratio in ratios)
        found[column] = {"median": median(ratios), "low": ratios[0], "high": ratios[-1], "met": met,
                         "pairs": len(ratios)}
    return found


def verdicts(table: dict) -> list[dict]:
    """Each goal, read from the run: ``{"goal", "ring", "uv", "met", "overlap"}``.

    ``met`` is ring's median at or below uv's (strictly below for "lt");
    ``overlap`` is True when the two ranges of repetitions overlap, so the
    order of the medians may not hold in another run (None with one
    repetition, which has no range).  A goal whose rows did not both run
    has ``met`` None.
    """
    found = []
    for column, _, comparison in GOALS:
        ring, uv = table["ring"].get(column), table["uv"].get(column)
        if ring is None or uv is None:
            found.append({"goal": column, "ring": ring, "uv": uv, "met": None, "overlap": None})
            continue
        met = ring["median"] <= uv["median"] if comparison == "le" else ring["median"] < uv["median"]
        # (One repetition each has no range: nothing to read the noise from.)
        ranged = ring["low"] < ring["high"] or uv["low"] < uv["high"]
        overlap = (ring["low"] <= uv["high"] and uv["low"] <= ring["high"]) if ranged else None
        found.append({"goal": column, "ring": ring, "uv": uv, "met": met, "overlap": overlap,
                      "comparison": comparison})
    return found


def render(data: dict) -> str:
    """race.md, from the JSON alone."""
    columns = [column for column, *_ in GOALS] + ["syscalls, depth 1", "syscalls, depth 24"]
    lines = ["| server | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for row, cells in data["table"].items():
        shown = []
        for column in columns:
            value = cells.get(column)
            if value is None:
                shown.append("–")
            elif "low" in value:
                shown.append(f"{value['median']:.2f} [{value['low']:.2f}–{value['high']:.2f}]")
            else:
                shown.append(f"{value['median']:.2f}")
        lines.append(f"| {row} | " + " | ".join(shown) + " |")
    lines += ["", "Server CPU µs per message (echo) or per request (HTTP): median of the interleaved "
              "repetitions, [lowest–highest]; system calls per request counted by strace under wrk "
              "(an io_uring loop's operations are not system calls: its `io_uring_enter`s are).", ""]
    for verdict in data["verdicts"]:
        if verdict["met"] is None:
            lines.append(f"- {verdict['goal']}: not measured (a row did not run).")
            continue
        relation = "at or below" if verdict["comparison"] == "le" else "below"
        state = "met" if verdict["met"] else "not met"
        noise = {True: " The ranges overlap: inside the noise, the order may change in another run.",
                 False: " The ranges are apart.", None: " One repetition: no range to read the noise from."
                 }[verdict["overlap"]]
        pair = data.get("paired", {}).get(verdict["goal"])
        pairing = "" if pair is None else (
            f" Paired by repetition, ring/uv {pair['median']:.2f} [{pair['low']:.2f}–{pair['high']:.2f}]; "
            f"ring {relation} uv in {pair['met']} of {pair['pairs']} repetitions.")
        lines.append(f"- {verdict['goal']}: ring {verdict['ring']['median']:.2f} against uv "
                     f"{verdict['uv']['median']:.2f}; the goal (ring {relation} uv) is {state}.{noise}{pairing}")
    lines += ["", f"{data['date'][:10]}, {data['machine'].get('cpu_model', '?')}, {data['machine'].get('python', '?')}. Command: `{data['command']}`; "
              "its steps: " + "; ".join(f"`{step}`" for step in data["steps"]) + "."]
    return "\n".join(lines) + "\n"


def conclusion(data: dict) -> str:
    parts = [f"{v['goal']} {'met' if v['met'] else 'not met' if v['met'] is not None else 'not measured'}"
             + (" (inside the noise)" if v.get("overlap") else "") for v in data["verdicts"]]
    return experiment.sentence("race, ring against uv", parts)


def main(argv: list[str] | None = None) -> int:
    parser = experiment.parser("race", __doc__, repeat=5, pin=False)
    parser.add_argument("--peers", default="", help="more peers, by name, in the echo and HTTP runs "
                        "(e.g. uringcore-protocol)")
    args = parser.parse_args(argv)
    if reason := uring.unavailable():
        print(f"benchmarks.race: not run: {reason}", file=sys.stderr)
        return 1
    out = output.json_path(parser, args, "race.json")
    repeat = args.repeat or (1 if args.quick else 5)
    quick = ["--quick"] if args.quick else []
    extra = [name for name in args.peers.split(",") if name]
    # (A peer asked for by name runs in the echo and HTTP steps; strace counts the fixed rows.)
    steps = [["benchmarks.echo", *quick, "--repeat", str(repeat), "--sizes", "1",
              "--servers", ",".join(ECHO_SERVERS + extra)],
             ["benchmarks.run", *quick, "--no-plot", "--repeat", str(repeat), "--stages", ",".join(HTTP_STAGES),
              "--peers", ",".join(HTTP_PEERS + extra), "--loads", ",".join(HTTP_LOADS),
              *([] if args.quick else ["--requests", f"ab-keepalive={AB_KEEPALIVE_REQUESTS}"])]]
    counting = strace_problem() is None
    if counting:
        steps.append(["benchmarks.syscalls", *quick, "--stages", ",".join(HTTP_STAGES),
                      "--peers", ",".join(HTTP_PEERS)])
    clock = experiment.Clock()
    with tempfile.TemporaryDirectory(prefix="race-") as tmp:
        found = [run_step(step, Path(tmp) / f"{step[0].rsplit('.', 1)[1]}.log") for step in steps]
    echo, http = found[0], found[1]
    counted = found[2] if counting else None
    table = figures(echo, http, counted, extra)
    data = experiment.document("race", argv, clock, settings={"repeat": repeat, "quick": args.quick,
                               "peers": extra}, steps=[" ".join(["python", "-m", *step]) for step in steps],
                               table=table, verdicts=verdicts(table), paired=paired(echo, http),
                               runs={"echo": echo["date"], "http": http["date"],
                                     "syscalls": counted["date"] if counted else None})
    return experiment.conclude(data, out, clock, render, conclusion, suffix=".md")


if __name__ == "__main__":
    sys.exit(main())
