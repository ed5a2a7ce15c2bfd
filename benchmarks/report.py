# benchmarks/report.py
"""The tables and plots of ``python -m benchmarks.run``'s JSON: the one reader the run, the book
and ``python -m benchmarks.report [JSON] [--loads L] [--markdown MD]`` share.  Importing it does
no I/O and loads neither matplotlib nor the project (the book imports it while it builds).

The JSON: the harness's head (benchmarks/harness/experiment.document), then::

    conclusion  the run in one line
    baseline    the server every ratio divides by ("asyncio-protocol"), or None
    loads       [{name, tool, title, measures, concurrency, keepalive, requests, duration_s, command,
                  pipeline (requests per write; the pipelined load only)}]
    servers     [{name, kind ("stage" | "peer"), summary, chapter, command, env, skipped (None or why)}]
    runs        [{rep, server, load, status, note, rps, p50_ms, p99_ms, completed,
                  failed, cpu_s, cpu_us_per_req, faults_per_req (the server's minor page
                  faults per request, proc(5)), seconds, newcomer_ms}]
    results     {load: {server: experiment.fold's summary of rps, p50_ms, p99_ms, cpu_us_per_req,
                  completed, newcomer_ms}}

A run's status is "ok", "timeout" (the tool waited in vain), "starved" (wrk: a connection opened
halfway through got no answer; ``newcomer_ms`` is its wait) or "error" (did not start, answered
wrongly, exited).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from benchmarks.harness import render
from benchmarks.harness.output import LOCAL, RESULTS
from benchmarks.harness.render import DASH, describe_machine
from benchmarks.harness.summary import NOISE  # the one noise rule

__all__ = ["FOOTNOTES", "footnotes", "format_text", "load", "plot", "server_names", "table"]

SCHEMA = 1

# The general notes under every table, keyed so the book can pick some.
FOOTNOTES = {
    "ratio": ("In parentheses: the figure divided by stdlib asyncio's (asyncio-protocol) in the same "
              "load. Above 1 is better for req/s; below 1 is better for latency and CPU."),
    "cpu": ("CPU µs/req is the server process's own user + system CPU time during the load (all "
            "its threads) divided by the requests it answered. It is the figure to compare "
            "stages by on a two-core machine: with the server pinned to one core and the load "
            "generator to the other, the generator saturates first (ab alone fills a core at about "
            "20,000 new connections a second), so req/s often measures the client, while the "
            "server's CPU per request does not depend on how fast the client is."),
    "latency": ("p50 and p99: the median and the 99th-percentile time from sending a request to "
                "receiving its whole response, in milliseconds, as the load generator saw it."),
    "failed": ("failed: requests the tool counted as failed (ab: failed + non-2xx; wrk: socket "
               "errors + non-2xx/3xx), summed over every repetition."),
    "partial": "*: some repetitions failed; the figures are medians of the others.",
    "spread": ("min–max: the lowest and highest req/s of the repetitions. \"noisy\": the "
               "repetitions' req/s or CPU µs/req differ by more than 25% (the largest is over "
               "1.25 times the smallest), so the median is a weak figure: run again on a quieter "
               "machine before reading much into that row."),
    "pipeline": ("With pipelining, wrk times a batch, not a request: p50 and p99 are the time "
                 "from writing a batch to receiving its last answer (no figure where wrk printed 0)."),
}

# A server whose every run ended so has no figures, only this word in the table.
_FAILED = ("timeout", "starved", "error")


def load(path: str | Path | None = None) -> dict:
    """Read a results JSON (default benchmarks/results/latest.json); raises ``FileNotFoundError`` if
    it is missing and ``ValueError`` if it is not a schema this module reads."""
    data = json.loads(Path(path or RESULTS / "latest.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a tinyloop benchmark JSON of schema {SCHEMA}")
    return data


def server_names(data: dict, load_name: str) -> list[str]:
    """The servers of one load's table, stages then peers: those with results for it, and the skipped."""
    results = data.get("results", {}).get(load_name, {})
    entries = sorted(data.get("servers", []), key=lambda entry: entry.get("kind") != "stage")  # stable
    return [entry["name"] for entry in entries if entry["name"] in results or entry.get("skipped")]


def _number(value: float | None, kind: str, ratio: float | None = None) -> str:
    """``value`` as a table shows a figure of ``kind`` (rps, ms, cpu), with `` (1.32×)`` when there is a ratio."""
    if value is None:
        return DASH
    if kind == "rps":
        text = f"{value:.0f}"
    elif kind == "cpu":
        text = f"{value:.0f}" if value >= 10 else f"{value:.1f}"
    else:  # milliseconds: three significant figures are plenty
        text = f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return text if ratio is None else f"{text} ({ratio:.2f}×)"


def _range(summary: dict, figure: str, kind: str) -> str | None:
    """``"400–600"``: ``figure``'s min–max over a summary's ok repetitions, or None."""
    low_high = (summary.get("spread") or {}).get(figure)
    return None if low_high is None else f"{_number(low_high[0], kind)}–{_number(low_high[1], kind)}"


def _load_entry(data: dict, load_name: str) -> dict:
    for entry in data.get("loads", []):
        if entry["name"] == load_name:
            return entry
    known = ", ".join(entry["name"] for entry in data.get("loads", []))
    raise KeyError(f"no load {load_name!r} in these results; they have: {known}")


def table(data: dict, load_name: str, servers: list[str] | None = None, *,
          ratios: bool = True) -> tuple[list[str], list[list[str]]]:
    """One load's results as ``(header, rows)`` of strings, a row per server (``servers``, default
    :func:`server_names`): req/s, its min–max (``noisy`` past NOISE), p50 and p99 ms, CPU µs/req,
    failed; with ``ratios``, ``"8123 (1.32×)"``.  A row without figures has its status in the req/s
    column; a partial one a ``*``.  Raises ``KeyError`` for a load or server the results lack."""
    _load_entry(data, load_name)
    results = data.get("results", {}).get(load_name, {})
    skipped = {e["name"]: e.get("skipped") for e in data.get("servers", [])}
    if servers is None:
        servers = server_names(data, load_name)
    elif unknown := [name for name in servers if name not in results and not skipped.get(name)]:
        raise KeyError(f"no results for {', '.join(map(repr, unknown))} in load {load_name!r}; "
                       f"the results have: {', '.join(server_names(data, load_name))}")
    rows = []
    for name in servers:
        summary = results.get(name) or {}
        failed = DASH if summary.get("failed") is None else str(summary["failed"])
        if summary.get("status", "skipped") in (*_FAILED, "skipped"):
            rows.append([name, summary.get("status", "skipped"), DASH, DASH, DASH, DASH, failed])
            continue
        ratio = (summary.get("ratio") or {}) if ratios else {}
        cells = [_number(summary[key], kind, ratio.get(key))
                 for key, kind in (("rps", "rps"), ("p50_ms", "ms"), ("p99_ms", "ms"), ("cpu_us_per_req", "cpu"))]
        if summary["status"] == "partial":
            cells[0] = cells[0].replace(" ", "* ", 1) if " " in cells[0] else cells[0] + "*"
        spread = _range(summary, "rps", "rps")
        cells.insert(1, DASH if spread is None else spread + (" noisy" if summary.get("noisy") else ""))
        rows.append([name, *cells, failed])
    return ["server", "req/s", "min–max", "p50 ms", "p99 ms", "CPU µs/req", "failed"], rows


def footnotes(data: dict, load_name: str, servers: list[str] | None = None) -> list[str]:
    """The notes particular to one load's table: why each failed, skipped or noisy row is so."""
    results = data.get("results", {}).get(load_name, {})
    skipped = {e["name"]: e.get("skipped") for e in data.get("servers", [])}
    notes = []
    for name in servers or server_names(data, load_name):
        summary = results.get(name)
        if summary is None and skipped.get(name):
            notes.append(f"{name}: skipped: {skipped[name]}")
        elif summary is not None and summary.get("note"):
            notes.append(f"{name}: {summary['note']}")
        if summary is not None and summary.get("noisy"):
            ranges = [f"{label} {text}" for figure, label, kind in (("rps", "req/s", "rps"),
                                                                      ("cpu_us_per_req", "CPU µs/req", "cpu"))
                      if (text := _range(summary, figure, kind))]
            notes.append(f"{name}: noisy: its repetitions differ by more than {NOISE:.0%} ({', '.join(ranges)})")
    return notes


def format_text(data: dict, load_names: list[str] | None = None, *, markdown: bool = False) -> str:
    """Every load's table (of ``load_names``, default all) with its command and notes, then the
    general footnotes and the machine: aligned text for a terminal, or with ``markdown`` Markdown
    (benchmarks/results/pipeline.md)."""
    out, baseline = [], data.get("baseline")
    entries = [entry for entry in data.get("loads", []) if load_names is None or entry["name"] in load_names]
    for entry in entries:
        header, rows = table(data, entry["name"], ratios=baseline is not None)
        notes = footnotes(data, entry["name"])
        if markdown:
            out += [f"**{entry['name']}**: {entry['title']}", "", *render.markdown(header, rows), "",
                    f"Command: `{entry['command']}`", "", *(f"- {note}" for note in notes)]
        else:
            out += [f"{entry['name']}: {entry['title']}", f"  $ {entry['command']}", "",
                    *render.align(header, rows), *(f"  {note}" for note in notes), ""]
    keys = (["ratio"] if baseline else []) + ["spread", "latency", "cpu", "failed"]
    if any(s.get("status") == "partial" for r in data.get("results", {}).values() for s in r.values()):
        keys.append("partial")
    if any(entry.get("pipeline") for entry in entries):
        keys.append("pipeline")
    out += [f"- {FOOTNOTES[key]}" for key in keys]
    if not baseline:
        out.append("- No ratios: asyncio-protocol was not in this run.")
    out += ["", f"Measured on: {describe_machine(data)}. Command: `{data.get('command', '')}`."]
    return "\n".join(out) + "\n"


# --- plots -----------------------------------------------------------------

_COLOURS = {"stage": "#4c72b0", "peer": "#dd8452"}


def plot(data: dict, load: str | None, out_path: str | Path, servers: list[str] | None = None) -> Path:
    """Draw requests/s and CPU µs/request bars per server (of ``load``, or a row per load with None)
    into a PNG at ``out_path``; returns it.  Raises ``ImportError`` without matplotlib and
    ``KeyError`` as :func:`table` does."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    kinds = {e["name"]: e.get("kind", "peer") for e in data.get("servers", [])}
    panels = []
    for name in [load] if load else [entry["name"] for entry in data.get("loads", [])]:
        table(data, name, servers)  # validates the names the same way
        panels.append((_load_entry(data, name), servers or server_names(data, name),
                       data.get("results", {}).get(name, {})))
    rows_per_panel = max(len(order) for _, order, _ in panels)
    figure = Figure(figsize=(11, len(panels) * (0.28 * rows_per_panel + 1.3) + 0.4))
    for (entry, order, results), axes in zip(panels, figure.subplots(len(panels), 2, squeeze=False)):
        for ax, figure_key, label, kind in zip(axes, ("rps", "cpu_us_per_req"), (
                "requests/s (higher is better)", "server CPU µs per request (lower is better)"), ("rps", "cpu")):
            values = [(results[server][figure_key] if server in results
                       and results[server]["status"] in ("ok", "partial") else None) for server in order]
            ax.barh(list(range(len(order))), [v or 0 for v in values],
                    color=[_COLOURS.get(kinds.get(s, "peer"), "#888888") for s in order])
            top = max((v for v in values if v is not None), default=1) or 1
            for y, (server, value) in enumerate(zip(order, values)):
                if value is None:
                    text = results[server]["status"] if server in results else "skipped"
                    ax.text(0, y, f" {text}", va="center", fontsize=8, color="#aa0000")
                else:
                    text = _number(value, kind, (results[server].get("ratio") or {}).get(figure_key))
                    ax.text(value + top * 0.01, y, text, va="center", fontsize=7)
            ax.set_yticks(list(range(len(order))), order, fontsize=8)
            ax.invert_yaxis()
            ax.set_xlim(0, top * 1.3)
            ax.set_title(f"{entry['name']}: {label}", fontsize=9)
            ax.tick_params(axis="x", labelsize=7)
    handles = [Patch(color=colour, label=f"{kind}s") for kind, colour in _COLOURS.items()]
    figure.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    # The machine line, wrapped to the figure's width (8 pt text, 11 in: ~150 characters a line),
    # so tight_layout keeps room for every line and none is clipped at the edges.
    title = textwrap.wrap(describe_machine(data), 150)
    figure.suptitle("\n".join(title), fontsize=8)
    figure.tight_layout(rect=(0, 0.03, 1, 1 - 0.03 * len(title) / len(panels)))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description="A saved run's tables again.")
    parser.add_argument("json", nargs="?", type=Path, default=None,
                        help="results file (default: your last run, benchmarks/results/local/latest.json, "
                             "else the book's reference run, benchmarks/results/latest.json)")
    parser.add_argument("--loads", type=lambda text: text.split(","), help="comma list of loads (default all)")
    parser.add_argument("--markdown", type=Path, help="also write the tables (of --loads) as Markdown here")
    args = parser.parse_args(argv)
    path = args.json or (LOCAL / "latest.json" if (LOCAL / "latest.json").exists() else RESULTS / "latest.json")
    try:
        data = load(path)
    except (FileNotFoundError, ValueError) as error:
        print(f"report: {error}; run `bash scripts/benchmark.sh` first", file=sys.stderr)
        return 1
    print(f"results: {path}")
    print(format_text(data, args.loads))
    if args.markdown:
        args.markdown.write_text(format_text(data, args.loads, markdown=True), encoding="utf-8")
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
