# tinyloop/quiz/steps.py
"""A quiz run's trace as text: one line per wait, per callback, per printed line.

The quiz command shows these side by side, one column per loop, so that a
reader sees *why* two loops print in different orders: which iteration ran
which callback.  The input is a Chrome trace written by
``python -m tinyloop.quiz.runner --trace`` (tinyloop.trace's recorder, plus
``print: LINE`` instants); only the first ``run`` span (``main()``) is shown,
not the runner's shutdown.
"""

from __future__ import annotations

from typing import Any

__all__ = ["steps"]

_LOOP_TID = 1


def steps(trace: dict[str, Any]) -> list[str]:
    """The loop's track of ``trace`` as lines of text, in time order.

    ``wait -> N ready`` opens an iteration (uv: a phase name in brackets),
    ``timers: N due`` when some were, each callback on a line of its own
    (a task's step with the task's name and what it then awaited), a
    transport's reads and writes (bytes and system calls), and ``| LINE``
    for each line the program printed.  Returns [] for a trace
    with no loop events.
    """
    events = [event for event in trace.get("traceEvents", []) if event.get("ph") in ("X", "i")]
    runs = [event for event in events if event["name"] == "run" and event["tid"] == _LOOP_TID]
    end = min((run["ts"] + run["dur"] for run in runs), default=float("inf"))
    events = [event for event in events if event["ts"] <= end]
    tasks = {event["tid"]: event["args"]["name"] for event in trace.get("traceEvents", [])
             if event.get("ph") == "M" and event.get("name") == "thread_name" and event["tid"] != _LOOP_TID}
    task_steps = [event for event in events if event["tid"] != _LOOP_TID and event["name"] in ("step", "exited")]
    lines = []
    for event in sorted(events, key=lambda event: (event["ts"], -event.get("dur", 0))):
        name, args = event["name"], event.get("args") or {}
        if event["tid"] != _LOOP_TID:
            continue
        if name == "wait":
            lines.append(f"wait -> {args.get('events', '?')} ready")
        elif name == "timers":
            if args.get("due"):
                lines.append(f"timers: {args['due']} due")
        elif name.startswith("print: "):
            lines.append(f"    | {name[len('print: '):]}")
        elif event.get("cat") == "selector":
            lines.append(f"    {name} fd {args.get('fd', '?')}")   # a selector wrapped to mark its calls
        elif event.get("cat") == "transport" and name in ("read", "write"):
            calls = args.get("syscalls", "?")
            if name == "read":
                lines.append(f"    read {args.get('bytes', '?')} bytes in {calls} recv")
            else:
                lines.append(f"    write {args.get('bytes', '?')} bytes in {calls} send, "
                             f"{args.get('buffered', '?')} left buffered")
        elif event.get("cat") == "callback":
            lines.append("  " + _callback(event, task_steps, tasks))
        elif event.get("cat") == "loop" and name not in ("run", "callbacks"):
            lines.append(f"[{name}]")   # a loop's own phase (uv's idle, check)
    return lines


def _callback(event: dict[str, Any], task_steps: list[dict[str, Any]], tasks: dict[int, str]) -> str:
    """A callback's line: its name, or for a task's step the task and what it awaits next."""
    start, end = event["ts"], event["ts"] + event["dur"]
    inside = [step for step in task_steps if start <= step["ts"] <= end]
    for step in inside:
        if step["name"] == "step":
            task = tasks.get(step["tid"], "task").removeprefix("task ")
            if any(other["name"] == "exited" and other["tid"] == step["tid"] for other in inside):
                return f"step {task} -> done"
            awaiting = (step.get("args") or {}).get("awaiting")
            return f"step {task} -> " + (f"awaits {awaiting}" if awaiting else "yields")
    return event["name"]
