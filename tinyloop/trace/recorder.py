"""The flight recorder: an instrument that keeps the loop's last N events as
a Chrome trace (chrome.py), which Perfetto, chrome://tracing and
timeline.py draw.

What it records, on these tracks (Chrome's "threads" of process 1):

    tid 1   the loop   spans: run > wait | timers | callbacks > each callback
                       (and a loop's own phases, uv's idle and check; on
                       tinyloop.ring, wait > io_uring_enter);
                       instants: read, write (bytes and system calls)
    tid 2+  one per task, in order of first sight: a span per step, with
                       what the step ended waiting on; spawned/exited instants
            and on tinyloop.ring one per kind of operation and descriptor
                       ("RECV fd 7"; "#2" when two are outstanding at once):
                       a span per operation, from the io_uring_enter that
                       submitted it to its final CQE; SQE, CQE, cancel marks
    counters           ready queue, ready descriptors per wait, bytes
                       buffered per transport, a generator task's stack depth,
                       SQEs submitted and CQEs reaped per io_uring_enter (ring)

Rules this file keeps:
  * Time is the loop's clock, read when a hook is called (``clock``), in
    microseconds since the recorder was made; on a virtual clock a trace is
    the same on every run.
  * Spans are written as complete X events when they end, so dropping old
    events never leaves a begin without its end.  Track names (M events)
    are kept apart from the ring and always written.
  * Memory is bounded: the events live in a ``deque(maxlen=capacity)``; once
    it is full each new event pushes out the oldest, and the trace says how
    many were dropped (``otherData.dropped_events``).
  * Never raises from a hook for a reason of its own (and if it did, the
    loop would remove it: see instrument.py).
"""

from __future__ import annotations

import errno
import itertools
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinyloop.trace import chrome
from tinyloop.trace.instrument import Instrument, callback_name, task_name

__all__ = ["DEFAULT_CAPACITY", "LOOP_TID", "PID", "Recorder", "cost_per_event", "record"]

PID = 1                       # one process per trace: the loop's
_CQE_F_MORE = 1 << 1          # IORING_CQE_F_MORE (io_uring_enter(2)): a multishot operation stays armed
LOOP_TID = 1                  # the loop's own track
DEFAULT_CAPACITY = 100_000    # events kept (about 20 MB of dicts at most)


class Recorder(Instrument):
    """Record a loop's hooks as Chrome Trace Events, keeping the last ``capacity``.

    ``clock`` is the loop's clock (``loop.time``: seconds, monotonic);
    timestamps are microseconds since the recorder was made.  Default:
    ``time.perf_counter``.  ``capacity`` (events, >= 1) bounds memory.
    ``name`` labels the loop's track (default: the loop's class name, at
    ``before_run``).  Raises ValueError for a capacity below 1.
    """

    def __init__(self, clock: Callable[[], float] | None = None, *,
                 capacity: int = DEFAULT_CAPACITY, name: str | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 event, not {capacity}")
        self._clock = clock if clock is not None else time.perf_counter
        self._t0 = self._clock()
        self.capacity = capacity
        self.events: deque[dict[str, Any]] = deque(maxlen=capacity)  # the ring
        self.recorded = 0                  # events ever appended, dropped ones included
        self.name = name
        self._tracks: dict[int, str] = {LOOP_TID: name or "loop"}   # tid -> name (M events)
        self._tids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._tids_by_id: dict[int, int] = {}   # for tasks that cannot be weakly referenced
        self._next_tid = itertools.count(LOOP_TID + 1)
        # Spans begun and not yet ended: their start times (microseconds).
        self._run: float | None = None
        self._wait: tuple[float, float | None] | None = None   # start, timeout asked
        self._timers: float | None = None
        self._callbacks: float | None = None
        self._phases: dict[str, float] = {}
        # A loop that reports phases (tinyloop.uv) gets its spans from them:
        # no "timers"/"callbacks" spans of Part II's four steps.
        self._phased = False
        self._handles: list[tuple[float, str]] = []           # nested callbacks, innermost last
        self._steps: dict[int, float] = {}                     # tid -> start of its current step
        # Completions (tinyloop.ring): each operation from its SQE to its final CQE.
        self._prepared: list[tuple[int, str]] = []      # SQEs not yet taken: (user_data, opcode), oldest first
        self._operations: dict[int, _Operation] = {}    # user_data -> its operation, until its final CQE
        self._lanes: dict[tuple[str, int], list[int]] = {}   # (opcode, fd) -> its tracks
        self._busy: set[int] = set()                    # operation tracks with one outstanding
        self._enter: float | None = None                # start of the io_uring_enter under way
        self._enters = 0                                # io_uring_enter calls seen
        self._reaped: int | None = None                 # CQEs since the last enter (None: no enter since the wait)

    # -- reading -------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        """How many events the ring has pushed out."""
        return self.recorded - len(self.events)

    def track_name(self, tid: int) -> str:
        """The name of track ``tid``: ``"loop (...)"`` or ``"task NAME"``.  Raises KeyError."""
        return self._tracks[tid]

    def now(self) -> float:
        """The clock, in microseconds since the recorder was made (rounded to the nanosecond)."""
        return round((self._clock() - self._t0) * 1e6, 3)

    def trace(self) -> dict[str, Any]:
        """The recording as a Trace Event Format JSON object (a dict ready for ``json.dumps``).

        Spans still open (a run stopped by Ctrl-C, a callback that raised
        KeyboardInterrupt) are closed at the current time, with
        ``args.unfinished`` set; the recorder itself is not changed.
        """
        metadata = [{"name": "process_name", "ph": "M", "pid": PID, "tid": LOOP_TID,
                     "args": {"name": "tinyloop"}}]
        for tid, name in self._tracks.items():
            metadata.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                             "args": {"name": name}})
            metadata.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                             "args": {"sort_index": tid}})
        return {
            "traceEvents": metadata + list(self.events) + self._unfinished(),
            "displayTimeUnit": "ms",
            "otherData": {"recorder": "tinyloop.trace", "capacity": self.capacity,
                          "recorded_events": self.recorded, "dropped_events": self.dropped},
        }

    def write(self, path: str | Path) -> Path:
        """Write :meth:`trace` to ``path`` as JSON; return the path.  Raises OSError if it cannot."""
        return chrome.write(self.trace(), path)

    def _unfinished(self) -> list[dict[str, Any]]:
        now = self.now()
        spans: list[tuple[str, float | None, int]] = [
            ("run", self._run, LOOP_TID),
            ("wait", self._wait[0] if self._wait else None, LOOP_TID),
            ("timers", self._timers, LOOP_TID),
            ("callbacks", self._callbacks, LOOP_TID),
        ]
        spans += [(name, start, LOOP_TID) for name, start in self._phases.items()]
        spans += [(name, start, LOOP_TID) for start, name in self._handles]
        spans += [("step", start, tid) for tid, start in self._steps.items()]
        spans.append(("io_uring_enter", self._enter, LOOP_TID))
        unfinished = [{"name": name, "ph": "X", "ts": start, "dur": round(now - start, 3), "pid": PID,
                       "tid": tid, "args": {"unfinished": True}}
                      for name, start, tid in spans if start is not None]
        # Operations still in the kernel's hands (a receive waiting for data, the self-pipe's poll).
        unfinished += [{"name": op.opcode, "cat": "operation", "ph": "X", "ts": op.start,
                        "dur": round(now - op.start, 3), "pid": PID, "tid": op.tid,
                        "args": {"fd": op.fd, "user_data": user_data, "unfinished": True}}
                       for user_data, op in self._operations.items()]
        return unfinished

    # -- writing events ------------------------------------------------------------
    #
    # span/instant/counter are public for recorders of loops without hooks
    # (outside.py's ReadinessProbe, the book's figures): times are
    # microseconds from now(), tid LOOP_TID or a task's track.

    def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.recorded += 1

    def span(self, name: str, start: float, end: float, tid: int = LOOP_TID,
             cat: str = "loop", args: dict[str, Any] | None = None) -> None:
        """Record a complete span (an X event) from ``start`` to ``end`` µs on track ``tid``."""
        event = {"name": name, "cat": cat, "ph": "X", "ts": start, "dur": round(end - start, 3),
                 "pid": PID, "tid": tid}
        if args:
            event["args"] = args
        self._emit(event)

    def instant(self, name: str, ts: float, tid: int = LOOP_TID, cat: str = "loop",
                args: dict[str, Any] | None = None) -> None:
        """Record an instant (an i event, thread scope) at ``ts`` µs on track ``tid``."""
        event = {"name": name, "cat": cat, "ph": "i", "s": "t", "ts": ts, "pid": PID, "tid": tid}
        if args:
            event["args"] = args
        self._emit(event)

    def counter(self, name: str, ts: float, **series: float) -> None:
        """Record counter ``name``'s values (a C event) at ``ts`` µs: ``series`` maps names to numbers."""
        self._emit({"name": name, "ph": "C", "ts": ts, "pid": PID, "tid": LOOP_TID, "args": series})


    def _tid(self, task: Any) -> int:
        try:
            tid = self._tids.get(task)
        except TypeError:  # not weakly referenceable
            tid = self._tids_by_id.get(id(task))
        if tid is None:
            tid = next(self._next_tid)
            try:
                self._tids[task] = tid
            except TypeError:
                self._tids_by_id[id(task)] = tid
            name = f"task {task_name(task)}"
            taken = set(self._tracks.values())
            if name in taken:  # two tasks of one coroutine function: number them
                name = next(f"{name}#{n}" for n in itertools.count(2) if f"{name}#{n}" not in taken)
            self._tracks[tid] = name
        return tid

    # -- the hooks -----------------------------------------------------------------

    def before_run(self, loop: Any) -> None:
        if self.name is None:
            self._tracks[LOOP_TID] = f"loop ({type(loop).__module__}.{type(loop).__name__})"
        self._run = self.now()

    def after_run(self, loop: Any) -> None:
        now = self.now()
        # What an exception (KeyboardInterrupt) cut short ends with the run.
        while self._handles:
            start, name = self._handles.pop()
            self.span(name, start, now, cat="callback", args={"unfinished": True})
        for name, start in self._phases.items():
            self.span(name, start, now, args={"unfinished": True})
        self._phases.clear()
        if self._wait is not None:
            self.span("wait", self._wait[0], now, args={"timeout": self._wait[1], "unfinished": True})
            self._wait = None
        if self._timers is not None:
            self.span("timers", self._timers, now, args={"unfinished": True})
            self._timers = None
        if self._enter is not None:
            self.span("io_uring_enter", self._enter, now, args={"unfinished": True})
            self._enter = None
        self._end_callbacks(now)
        if self._run is not None:
            self.span("run", self._run, now)
            self._run = None

    def before_io_wait(self, timeout: float | None) -> None:
        now = self.now()
        self._end_callbacks(now)
        self._wait = (now, timeout)

    def after_io_wait(self, events: int) -> None:
        now = self.now()
        if self._wait is not None:
            start, timeout = self._wait
            self.span("wait", start, now, args={"timeout": timeout, "events": events})
            self._wait = None
        self.counter("ready descriptors", now, events=events)
        if self._reaped is not None:
            self.counter("CQEs per io_uring_enter", now, cqes=self._reaped)
            self._reaped = None
        if not self._phased:
            self._timers = now

    def timers_due(self, count: int, ready: int) -> None:
        now = self.now()
        if self._phased:
            self.instant("timers due", now, args={"due": count})
        elif self._timers is not None:
            self.span("timers", self._timers, now, args={"due": count})
            self._timers = None
        self.counter("ready queue", now, handles=ready)
        if not self._phased:
            self._callbacks = now

    def _end_callbacks(self, now: float) -> None:
        if self._callbacks is not None:
            self.span("callbacks", self._callbacks, now)
            self._callbacks = None

    def before_phase(self, name: str) -> None:
        self._phased = True
        self._phases[name] = self.now()

    def after_phase(self, name: str) -> None:
        start = self._phases.pop(name, None)
        if start is not None:
            self.span(name, start, self.now())

    def before_callback(self, handle: Any) -> None:
        # Named now: a callback may cancel its own handle (remove_reader does).
        self._handles.append((self.now(), callback_name(handle)))

    def after_callback(self, handle: Any) -> None:
        if self._handles:
            start, name = self._handles.pop()
            self.span(name, start, self.now(), cat="callback")

    def task_spawned(self, task: Any) -> None:
        self.instant("spawned", self.now(), self._tid(task), cat="task")

    def before_task_step(self, task: Any) -> None:
        self._steps[self._tid(task)] = self.now()

    def after_task_step(self, task: Any, awaiting: Any) -> None:
        now = self.now()
        tid = self._tid(task)
        start = self._steps.pop(tid, None)
        if start is not None:
            self.span("step", start, now, tid, cat="task", args={"awaiting": _describe(awaiting)})
        stack = getattr(task, "stack", None)
        if isinstance(stack, list):  # the generators scheduler: a stack of generators
            self.counter(f"stack depth ({task_name(task)})", now, depth=len(stack))

    def task_exited(self, task: Any) -> None:
        self.instant("exited", self.now(), self._tid(task), cat="task")

    def transport_read(self, transport: Any, nbytes: int, syscalls: int) -> None:
        self.instant("read", self.now(), cat="transport",
                      args={"bytes": nbytes, "syscalls": syscalls, "transport": _fd_name(transport)})

    def transport_wrote(self, transport: Any, nbytes: int, syscalls: int, buffered: int) -> None:
        now = self.now()
        name = _fd_name(transport)
        self.instant("write", now, cat="transport",
                      args={"bytes": nbytes, "syscalls": syscalls, "buffered": buffered,
                            "transport": name})
        self.counter(f"buffered ({name})", now, bytes=buffered)

    # Discussion: an operation's span runs from the io_uring_enter that
    # submitted it (the kernel has it from then on) to its final CQE; its
    # SQE mark says when the loop prepared it, often in a callback well
    # before that enter.  Operations of one kind on one descriptor share a
    # track, one after another (a transport keeps one receive and one send
    # outstanding); a second one outstanding at once gets a track of its
    # own ("#2"), so a track's spans never overlap.  The batch is matched
    # to the kernel's count: ``after_enter`` takes the oldest ``submitted``
    # SQEs prepared (a ring that submits early because its queue is full,
    # with no enter of the loop's, shows them in the next batch).

    def sqe_prepared(self, user_data: int, opcode: str, fd: int, target: int) -> None:
        now = self.now()
        self._prepared.append((user_data, opcode))
        victim = self._operations.get(target) if target else None
        if victim is not None:
            self.instant("cancel", now, victim.tid, cat="operation", args={"user_data": target})
        if not user_data:
            return   # nobody waits for its completion: counted in its batch only
        stale = self._operations.pop(user_data, None)
        if stale is not None:   # another loop on this recorder numbers its operations from 1 too
            self._busy.discard(stale.tid)
        tid = self._lane(opcode, fd)
        self._operations[user_data] = _Operation(opcode, fd, tid, now)
        self.instant("SQE", now, tid, cat="operation", args={"user_data": user_data})

    def _lane(self, opcode: str, fd: int) -> int:
        """The track for a new ``opcode`` operation on ``fd``: the first of its kind with none outstanding."""
        lanes = self._lanes.setdefault((opcode, fd), [])
        for tid in lanes:
            if tid not in self._busy:
                break
        else:
            tid = next(self._next_tid)
            name = opcode if fd < 0 else f"{opcode} fd {fd}"
            self._tracks[tid] = f"{name} #{len(lanes) + 1}" if lanes else name
            lanes.append(tid)
        self._busy.add(tid)
        return tid

    def before_enter(self) -> None:
        self._enter = self.now()

    def after_enter(self, submitted: int) -> None:
        now = self.now()
        start = self._enter if self._enter is not None else now
        self._enter = None
        if self._reaped is not None:  # the wait's earlier enter (a wait may enter again: Proactor.select)
            self.counter("CQEs per io_uring_enter", start, cqes=self._reaped)
        self._enters += 1
        taken, self._prepared = self._prepared[:submitted], self._prepared[submitted:]
        sqes: dict[str, int] = {}
        for order, (user_data, opcode) in enumerate(taken):
            sqes[opcode] = sqes.get(opcode, 0) + 1
            operation = self._operations.get(user_data) if user_data else None
            if operation is not None:
                operation.submitted, operation.enter, operation.order = start, self._enters, order
        self.span("io_uring_enter", start, now,
                  args={"enter": self._enters, "submitted": submitted, "sqes": sqes})
        self.counter("SQEs per io_uring_enter", now, sqes=submitted)
        self._reaped = 0

    def cqe_reaped(self, user_data: int, res: int, flags: int) -> None:
        now = self.now()
        if self._reaped is not None:
            self._reaped += 1
        operation = self._operations.get(user_data)
        if operation is None:
            return   # prepared before this recorder was added
        self.instant("CQE", now, operation.tid, cat="operation", args={"user_data": user_data, "res": res})
        if flags & _CQE_F_MORE:
            return   # a multishot operation: still armed, more CQEs to come
        del self._operations[user_data]
        self._busy.discard(operation.tid)
        args: dict[str, Any] = {"fd": operation.fd, "user_data": user_data, "res": res}
        if res < 0:
            args["error"] = errno.errorcode.get(-res, str(-res))
        if operation.enter:
            args.update(enter=operation.enter, order=operation.order)
        args["prepared"] = operation.prepared
        self.span(operation.opcode, operation.start, now, operation.tid, cat="operation", args=args)


class _Operation:
    """An io_uring operation the recorder follows: what, where, its track, and its times (µs)."""

    __slots__ = ("opcode", "fd", "tid", "prepared", "submitted", "enter", "order")

    def __init__(self, opcode: str, fd: int, tid: int, prepared: float) -> None:
        self.opcode, self.fd, self.tid, self.prepared = opcode, fd, tid, prepared
        self.submitted: float | None = None   # the start of the io_uring_enter that took it
        self.enter = 0                        # that enter's number (1, 2, ...), 0 before it
        self.order = 0                        # its place in that enter's batch, from 0

    @property
    def start(self) -> float:
        """Where its span starts: its submission, or its preparation if it was never submitted."""
        return self.submitted if self.submitted is not None else self.prepared


def record(loop: Any, capacity: int = DEFAULT_CAPACITY) -> Recorder:
    """Make a :class:`Recorder` on ``loop``'s clock and install it; return it.

    ``loop`` is any loop with ``add_instrument`` and ``time()`` (Parts II-IV).
    """
    recorder = Recorder(loop.time, capacity=capacity)
    loop.add_instrument(recorder)
    return recorder


def cost_per_event(repeat: int = 5, iterations: int = 2000) -> float:
    """What recording one event costs the loop here: CPU seconds, the median of ``repeat`` timings.

    Each timing replays ``iterations`` iterations of a server's loop through
    a fresh :class:`Recorder`'s hooks (a wait that returns one event, the
    timers step, one callback that reads and writes: nine events each) and
    divides the CPU time this thread spent (``time.thread_time``: other
    processes on a busy machine do not count) by the events recorded.  A
    trace's cost is then about this times its recorded events
    (``otherData.recorded_events``): time the loop spent in the recorder,
    inside the spans it drew.
    """
    import statistics

    class Handle:
        def _callback(self) -> None:
            """A callback's stand-in: the recorder only names it."""

    handle, transport = Handle(), object()
    timings = []
    for _ in range(repeat):
        recorder = Recorder(capacity=iterations * 10)
        start = time.thread_time()
        for _ in range(iterations):
            recorder.before_io_wait(None)
            recorder.after_io_wait(1)
            recorder.timers_due(0, 1)
            recorder.before_callback(handle)
            recorder.transport_read(transport, 100, 1)
            recorder.transport_wrote(transport, 100, 1, 0)
            recorder.after_callback(handle)
        timings.append((time.thread_time() - start) / recorder.recorded)
    return statistics.median(timings)


def _describe(awaiting: Any) -> str | None:
    """What a task waits on, short: ``"Future"``, ``"read_wait fd 5"``, None."""
    if awaiting is None:
        return None
    if isinstance(awaiting, tuple) and awaiting and isinstance(awaiting[0], str):
        args = " ".join(repr(arg) if not isinstance(arg, int) else f"fd {arg}" for arg in awaiting[1:])
        if awaiting[0] == "sleep":
            args = " ".join(f"{arg!r} s" for arg in awaiting[1:])
        return f"{awaiting[0]} {args}".strip()
    name = type(awaiting).__name__
    if name in ("Task", "_GatheringFuture"):
        return f"{name} {task_name(awaiting)}" if name == "Task" else "gather"
    return name


def _fd_name(transport: Any) -> str:
    """A transport's short name for a counter: ``fd 7`` while its socket is open."""
    get_extra = getattr(transport, "get_extra_info", None)
    sock = get_extra("socket") if callable(get_extra) else getattr(transport, "_sock", None)
    fileno = getattr(sock, "fileno", None)
    if callable(fileno):
        try:
            fd = fileno()
        except OSError:
            fd = -1
        if fd >= 0:
            return f"fd {fd}"
    return f"transport {id(transport):#x}"
