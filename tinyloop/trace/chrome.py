"""The Chrome Trace Event Format: writing a trace file, and checking one.

The format (Google's "Trace Event Format" document, which chrome://tracing,
Perfetto's UI and viztracer's vizviewer read) is JSON: an object whose
``traceEvents`` is a list of events, each ``{"name", "ph", "ts", "pid",
"tid", ...}``.  ``ph`` is the phase: B/E begin and end a span on a thread,
X is a complete span with ``dur``, i an instant (``s``: "t" thread, "p"
process, "g" global), C a counter (``args`` maps series to numbers), M
metadata (``process_name``, ``thread_name``, ``*_sort_index``).  ``ts`` and
``dur`` are in microseconds.

Rules this file keeps:
  * A file written here is always whole: the JSON is made in memory and
    written with one call, so a crash or Ctrl-C mid-trace leaves either no
    file or a valid one (see Recorder.write for the partial trace).
  * ``problems()`` is the format check every test runs on what we write;
    it checks the document's rules, not our own habits.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["PHASES", "TraceFormatError", "check", "overlaps", "problems", "write"]

# The phases we write and check, with the fields each requires besides
# name/ph/pid/tid (and ts, which all but M events need).
PHASES: dict[str, tuple[str, ...]] = {
    "B": (), "E": (), "X": ("dur",), "i": (), "I": (), "C": ("args",), "M": ("args",),
}
_METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name",
             "thread_sort_index"}


class TraceFormatError(ValueError):
    """A trace that breaks the Trace Event Format; ``args[0]`` lists the problems."""


def problems(trace: Any) -> list[str]:
    """Every way ``trace`` (a parsed JSON document) breaks the Trace Event Format; [] if none.

    Checks: the JSON Object Format's ``traceEvents`` list (or the bare array
    format); each event's name, phase, pid and tid, its ``ts`` in
    microseconds (a finite number >= 0), an X event's ``dur`` >= 0, a C
    event's numeric series, an i event's scope, an M event's known name and
    its ``args.name``, and B/E spans that nest per thread.  :func:`overlaps`
    checks X spans' nesting too.
    """
    found: list[str] = []
    if isinstance(trace, dict):
        events = trace.get("traceEvents")
        if not isinstance(events, list):
            return ["the JSON object has no traceEvents list"]
        unit = trace.get("displayTimeUnit", "ms")
        if unit not in ("ms", "ns"):
            found.append(f"displayTimeUnit must be 'ms' or 'ns', not {unit!r}")
    elif isinstance(trace, list):
        events = trace
    else:
        return [f"a trace is a JSON object or array, not {type(trace).__name__}"]
    open_spans: dict[tuple[Any, Any], list[str]] = {}
    for index, event in enumerate(events):
        where = f"event {index}"
        if not isinstance(event, dict):
            found.append(f"{where}: not an object")
            continue
        ph = event.get("ph")
        if ph not in PHASES:
            found.append(f"{where}: unknown phase {ph!r}")
            continue
        where = f"event {index} ({ph} {event.get('name')!r})"
        if not isinstance(event.get("name"), str):
            found.append(f"{where}: name must be a string")
        for key in ("pid", "tid"):
            if not isinstance(event.get(key), int) or isinstance(event.get(key), bool):
                found.append(f"{where}: {key} must be an integer")
        if ph != "M" or "ts" in event:
            ts = event.get("ts")
            if not _number(ts) or ts < 0:
                found.append(f"{where}: ts must be a number of microseconds >= 0, not {ts!r}")
        for key in PHASES[ph]:
            if key not in event:
                found.append(f"{where}: needs {key!r}")
        if ph == "X" and not (_number(event.get("dur")) and event["dur"] >= 0):
            found.append(f"{where}: dur must be a number of microseconds >= 0")
        if ph == "C":
            args = event.get("args")
            if not isinstance(args, dict) or not args or not all(_number(v) for v in args.values()):
                found.append(f"{where}: a counter's args must map series names to numbers")
        if ph in ("i", "I") and event.get("s", "t") not in ("g", "p", "t"):
            found.append(f"{where}: an instant's scope s must be 'g', 'p' or 't'")
        if ph == "M":
            if event.get("name") not in _METADATA:
                found.append(f"{where}: unknown metadata name")
            elif event["name"].endswith("_name") and not isinstance(event.get("args", {}).get("name"), str):
                found.append(f"{where}: needs args.name, a string")
        if ph == "B":
            open_spans.setdefault((event.get("pid"), event.get("tid")), []).append(event.get("name"))
        elif ph == "E":
            stack = open_spans.get((event.get("pid"), event.get("tid")))
            if not stack:
                found.append(f"{where}: E with no open B on its thread")
            else:
                stack.pop()
    return found


def overlaps(trace: Any) -> list[str]:
    """X spans on one thread that overlap without one containing the other; [] if none.

    Trace viewers draw a thread's spans as one stack: Perfetto flags such a
    pair as improperly nested.  (Traces from before the recorder closed
    Ctrl-C's cut-short spans with the run can have one.)
    """
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    found = []
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X" and _number(event.get("ts")) \
                and _number(event.get("dur")):
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    slack = 0.002  # µs: timestamps are written to the nanosecond
    for spans in by_thread.values():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        ends: list[tuple[float, str]] = []
        for event in spans:
            while ends and ends[-1][0] <= event["ts"] + slack:
                ends.pop()
            end = event["ts"] + event["dur"]
            if ends and end > ends[-1][0] + slack:
                found.append(f"X {event['name']!r} at {event['ts']} µs overlaps {ends[-1][1]!r} "
                             f"on its thread without nesting")
            ends.append((end, event["name"]))
    return found


def check(trace: Any) -> None:
    """Raise :class:`TraceFormatError` listing the problems of ``trace``; return if it has none."""
    found = problems(trace)
    if found:
        raise TraceFormatError(found)


def write(trace: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``trace`` as JSON to ``path`` (parents created); return the path.

    Raises OSError if the file cannot be written (the message names it).
    """
    path = Path(path)
    text = json.dumps(trace, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
