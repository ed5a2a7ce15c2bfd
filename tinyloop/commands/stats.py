"""``python -m tinyloop serve STAGE --stats``: a live panel of the running
loop, as tokio-console shows a tokio runtime.

    iterations/s       how often the loop went round (waits per second)
    wait / timers /    the share of wall time in each step of the
    callbacks          iteration (uv: the poll phase's callbacks count
                       as callbacks, the rest of it as wait)
    ready queue        its length when the callbacks step began: last, max
    slowest callbacks  the longest single callbacks of the last windows
    tasks              alive now (spawned, not yet exited), steps per second

Rules this file keeps:
  * Costs nothing unless asked for: nothing here is imported by ``serve``
    without ``--stats``, and the loop's hooks stay one attribute test.
  * The hooks only add to counters in the loop's thread; the panel's
    thread takes the whole window at once (one attribute swap) every
    refresh, so the two never share a half-updated window.
  * The panel is drawn by rich (tinyloop stays standard-library only:
    rich is in the dev extra, and its absence is a one-line message).
"""

from __future__ import annotations

import heapq
import importlib
import sys
import threading
import time
from collections import deque
from typing import Any

from tinyloop.serving import announce, listen, log, stop_on_sigterm
from tinyloop.trace.instrument import callback_name, for_new_loops

__all__ = ["LoopStats", "render", "serve_with_stats"]

REFRESH = 0.5        # seconds between two redraws of the panel
SLOWEST = 5          # callbacks listed
HISTORY = 20         # windows the slowest callbacks are kept for (10 s)


class _Window:
    """Counters for one refresh interval."""

    __slots__ = ("start", "iterations", "wait", "timers", "callbacks", "callback_count",
                 "ready_last", "ready_max", "slowest", "read", "written", "steps", "tasks")

    def __init__(self, start: float) -> None:
        self.start = start
        self.iterations = 0
        self.wait = self.timers = self.callbacks = 0.0   # seconds
        self.callback_count = 0
        self.ready_last = self.ready_max = 0
        self.slowest: list[tuple[float, str]] = []       # a min-heap of (seconds, name)
        self.read = self.written = 0                      # bytes
        self.steps = 0                                    # task steps
        self.tasks = 0                                    # tasks alive at the window's end


class LoopStats:
    """An instrument that sums what the panel shows, per window of :data:`REFRESH` seconds.

    Reads ``time.perf_counter`` (wall time, seconds).  :meth:`take` returns
    the window so far and starts a new one.
    """

    def __init__(self) -> None:
        self.window = _Window(time.perf_counter())
        self._wait_start: float | None = None
        self._timers_start: float | None = None
        self._callback_start: list[float] = []
        self._in_wait = False
        self._nested = 0.0      # callback time inside the current wait (uv's poll phase)
        self._phased = False    # the loop reports phases (uv): timers are not a step of their own
        self._tasks = 0         # spawned and not yet exited

    def before_phase(self, name: str) -> None:
        self._phased = True

    def take(self) -> _Window:
        """The current window, closed now; counting goes on in a fresh one."""
        now = time.perf_counter()
        window, self.window = self.window, _Window(now)
        window.tasks = self._tasks
        start = self._wait_start
        if self._in_wait and start is not None:
            # Blocked in the wait right now (an idle server): count it so far.
            window.wait += max(0.0, now - start - self._nested)
            self._wait_start, self._nested = now, 0.0
        return window

    def before_io_wait(self, timeout: float | None) -> None:
        self.window.iterations += 1
        self._wait_start = time.perf_counter()
        self._in_wait = True
        self._nested = 0.0

    def after_io_wait(self, events: int) -> None:
        now = time.perf_counter()
        if self._wait_start is not None:
            self.window.wait += max(0.0, now - self._wait_start - self._nested)
        self._wait_start = None
        self._in_wait = False
        self._timers_start = now

    def timers_due(self, count: int, ready: int) -> None:
        now = time.perf_counter()
        window = self.window
        if self._timers_start is not None and not self._phased:
            window.timers += now - self._timers_start
            self._timers_start = None
        window.ready_last = ready
        window.ready_max = max(window.ready_max, ready)

    def before_callback(self, handle: Any) -> None:
        self._callback_start.append(time.perf_counter())

    def after_callback(self, handle: Any) -> None:
        if not self._callback_start:
            return
        duration = time.perf_counter() - self._callback_start.pop()
        if self._callback_start:
            return  # nested (a task step inside its callback): counted by the outer one
        window = self.window
        window.callbacks += duration
        window.callback_count += 1
        if self._in_wait:
            self._nested += duration
        entry = (duration, callback_name(handle))
        if len(window.slowest) < SLOWEST:
            heapq.heappush(window.slowest, entry)
        elif entry > window.slowest[0]:
            heapq.heapreplace(window.slowest, entry)

    def task_spawned(self, task: Any) -> None:
        self._tasks += 1

    def task_exited(self, task: Any) -> None:
        self._tasks -= 1

    def after_task_step(self, task: Any, awaiting: Any) -> None:
        self.window.steps += 1

    def transport_read(self, transport: Any, nbytes: int, syscalls: int) -> None:
        self.window.read += nbytes

    def transport_wrote(self, transport: Any, nbytes: int, syscalls: int, buffered: int) -> None:
        self.window.written += nbytes


def render(title: str, window: _Window, end: float, slowest: list[tuple[float, str]]) -> Any:
    """The panel for one window (a rich renderable).  Imports rich: ImportError without it."""
    Group = _rich("console").Group
    Panel = _rich("panel").Panel
    Table = _rich("table").Table

    elapsed = max(end - window.start, 1e-9)
    figures = Table.grid(padding=(0, 2))
    figures.add_column(justify="right", style="bold")
    figures.add_column()
    figures.add_row("iterations/s", f"{window.iterations / elapsed:,.0f}")
    figures.add_row("callbacks/s", f"{window.callback_count / elapsed:,.0f}")
    shares = [("wait", window.wait), ("timers", window.timers), ("callbacks", window.callbacks)]
    rest = max(0.0, elapsed - sum(value for _, value in shares))
    for name, value in [*shares, ("loop itself", rest)]:
        share = min(1.0, value / elapsed)
        figures.add_row(f"time in {name}", f"{share:6.1%}  {'█' * round(share * 30)}")
    figures.add_row("ready queue", f"{window.ready_last} now, {window.ready_max} at most")
    figures.add_row("tasks", f"{window.tasks} alive, {window.steps / elapsed:,.0f} steps/s")
    figures.add_row("read / written", f"{window.read / elapsed / 1024:,.1f} / "
                                     f"{window.written / elapsed / 1024:,.1f} KiB/s")
    table = Table(title="slowest callbacks (last 10 s)", title_justify="left", expand=False, min_width=44)
    table.add_column("callback")
    table.add_column("ms", justify="right")
    for duration, name in slowest:
        table.add_row(name, f"{duration * 1000:.2f}")
    return Panel(Group(figures, table), title=title, subtitle="Ctrl-C stops the server")


def _rich(module: str) -> Any:
    """``rich.MODULE``.  rich is optional (the dev extra), so it is imported by
    name, here only, and tinyloop itself stays standard-library only."""
    return importlib.import_module(f"rich.{module}")


def serve_with_stats(stage: str, module: Any, host: str, port: int) -> int:
    """``serve STAGE --stats``: serve as ``serve`` does, with the panel redrawn every :data:`REFRESH` s.

    Returns the exit status: 2 if rich is missing or the stage has no loop
    of ours to watch, 1 if the port cannot be bound, else 0 after Ctrl-C.
    """
    try:
        Console = _rich("console").Console
        Live = _rich("live").Live
    except ImportError:
        log("serve --stats draws its panel with rich, which is not installed: pip install rich")
        return 2
    from tinyloop import stages
    from tinyloop.commands.trace import HOOKED_CHAPTERS
    if stages.get(stage).chapter not in HOOKED_CHAPTERS and stages.get(stage).loop is None:
        log(f"serve --stats watches an event loop of ours; stage {stage!r} has none "
            "(try callbacks, generators, coroutines, aio, uv or ring)")
        return 2
    stop_on_sigterm()
    try:
        sock = listen(host, port)
    except OSError as error:
        log(f"cannot listen on {host}:{port}: {error.strerror}")
        return 1
    stats = LoopStats()
    history: deque[list[tuple[float, str]]] = deque(maxlen=HISTORY)
    title = f"tinyloop serve {stage} on {host}:{sock.getsockname()[1]}"
    done = threading.Event()
    console = Console(file=sys.stdout)

    def draw(live: Any) -> None:
        while not done.wait(REFRESH):
            window = stats.take()
            history.append(window.slowest)
            slowest = heapq.nlargest(SLOWEST, (entry for w in history for entry in w))
            live.update(render(title, window, time.perf_counter(), slowest))

    try:
        announce(stage, sock)
        with Live(render(title, stats.window, time.perf_counter(), []), console=console,
                  refresh_per_second=4, transient=False) as live:
            painter = threading.Thread(target=draw, args=(live,), name="tinyloop-stats", daemon=True)
            painter.start()
            try:
                with for_new_loops(stats):
                    module.serve(sock)
            finally:
                done.set()
                painter.join(timeout=2)
    except KeyboardInterrupt:
        log(f"{stage}: stopped")
    finally:
        sock.close()
    return 0
