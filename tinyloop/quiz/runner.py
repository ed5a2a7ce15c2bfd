# tinyloop/quiz/runner.py
"""Run one quiz program on one loop: ``python -m tinyloop.quiz.runner LOOP PROGRAM``.

The quiz command starts this in a subprocess per loop, so that a program
that hangs or crashes costs only its own process, and each loop starts from
a fresh interpreter.  The program's ``main()`` runs under
``asyncio.Runner(loop_factory=...)``, the way ``asyncio.run`` would run it
on that loop.  Exit status: the program's (0 when it returns), or
``UNAVAILABLE`` (3) with one line on stderr when the loop is not installed
here (uvloop not installed, tinyloop.uv's extension not built).

``--trace FILE`` records the run with tinyloop.trace's recorder, on a loop
that has instrument hooks, and writes it to FILE as a Chrome trace, with
each printed line as an instant event named ``print: LINE`` on the loop's
track.  ``--virtual-clock`` (aio only) runs the loop on a clock that moves
only when the loop would sleep (and 10 µs per reading, so that spans have
a width), so a trace's times are the same on every run: the book's quiz
traces are made so.  ``--batch DIR LOOP PROGRAM...`` runs and records
several programs in one interpreter (``run_batch``).
"""

from __future__ import annotations

import asyncio
import importlib
import io
import runpy
import selectors
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FACTORIES", "UNAVAILABLE", "VirtualClock", "VirtualTimeSelector", "loop_factory", "main", "run",
           "run_batch"]

UNAVAILABLE = 3
VIRTUAL_TICK = 1e-5  # seconds the virtual clock moves per reading (--virtual-clock)

# Loop name -> (module, name of its loop factory).  uvloop is imported only
# here, when asked for, and only if installed: tinyloop itself needs none of it.
FACTORIES: dict[str, tuple[str, str]] = {
    "asyncio": ("asyncio", "new_event_loop"),
    "uvloop": ("uvloop", "new_event_loop"),
    "aio": ("tinyloop.aio", "new_event_loop"),
    "uv": ("tinyloop.uv", "new_event_loop"),
}


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The function that makes a new loop of kind ``loop`` (a key of FACTORIES).

    Raises KeyError for an unknown name, ImportError when the loop is not
    installed here (its message says why).
    """
    module_name, attribute = FACTORIES[loop]
    module = importlib.import_module(module_name)
    factory = getattr(module, attribute)
    if module_name == "tinyloop.uv":
        from tinyloop.uv import loop as _
    return factory


class VirtualClock:
    """A clock (seconds, from 0) that moves when the loop would sleep, and ``tick`` s per reading.

    Discussion: on a clock that stands still between waits, every event of
    an iteration has the same time, and a timeline shows nothing.  Moving it
    a fixed tick per reading keeps it deterministic and gives each span a
    width that counts the clock readings inside it: order, not cost.
    """

    def __init__(self, tick: float = 0.0) -> None:
        self.now = 0.0
        self.tick = tick

    def __call__(self) -> float:
        now = self.now
        self.now += self.tick
        return now


class VirtualTimeSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The system's selector, asked without waiting; a wait with nothing ready moves the clock instead.

    Readiness is real (the quizzes' sockets are real), time is not: a
    ``select(timeout)`` that finds nothing ready advances ``clock`` by
    ``timeout`` seconds and returns at once, as if the loop had slept.  With
    ``timeout=None`` it really waits, for I/O only.
    """

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """The descriptors ready now; none ready moves the clock by ``timeout`` s (None: wait for I/O)."""
        events = super().select(None if timeout is None else 0)
        if not events and timeout:
            self.clock.now += max(0.0, timeout)
        return events


class _PrintedLines(io.TextIOBase):
    """stdout that also notes each line printed, with the recorder's time."""

    def __init__(self, stream: Any, now: Callable[[], float]) -> None:
        self.stream, self.now = stream, now
        self.lines: list[tuple[float, str]] = []
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.stream.write(text)
        *whole, self._partial = (self._partial + text).split("\n")
        self.lines += [(self.now(), line) for line in whole]
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def run(loop: str, program: str, trace: str | None = None, virtual_clock: bool = False) -> None:
    """Run ``program``'s ``main()`` on a new ``loop``; with ``trace``, write its recording there.

    Raises ImportError when the loop is not installed, ValueError for
    ``virtual_clock`` on a loop other than aio, and what the program raises.
    stdlib asyncio and uvloop, which have no hooks, are recorded from
    outside (tinyloop.trace.outside: what that cannot see is missing).
    """
    if virtual_clock and loop != "aio":
        raise ValueError("--virtual-clock needs a loop that takes a selector and a clock: aio")
    factory = loop_factory(loop)
    if virtual_clock:
        from tinyloop.aio.unix_events import SelectorEventLoop
        clock = VirtualClock(tick=VIRTUAL_TICK)
        factory = lambda: SelectorEventLoop(VirtualTimeSelector(clock), clock)
    if trace is not None and loop in ("asyncio", "uvloop"):
        # No hooks: recorded from outside, by a subclass (tinyloop/trace/outside.py).
        from tinyloop.trace import outside
        factory = outside.TracedAsyncioLoop if loop == "asyncio" else outside.traced_uvloop_class()
    namespace = runpy.run_path(program, run_name="tinyloop_quiz")
    recorders: list[Any] = []
    made = factory

    def instrumented() -> asyncio.AbstractEventLoop:
        new = made()
        if trace is not None and hasattr(new, "add_instrument"):
            from tinyloop.trace.recorder import Recorder
            # The loop's own clock when it is virtual (the same trace every
            # run); else perf_counter, since uvloop's time() counts whole ms.
            recorder = Recorder(new.time if virtual_clock else time.perf_counter)
            new.add_instrument(recorder)
            recorders.append(recorder)
        elif trace is not None:
            print(f"no trace: {loop}'s loop has no instrument hooks", file=sys.stderr)
        return new

    stdout = sys.stdout
    with asyncio.Runner(loop_factory=instrumented) as runner:
        printed = sys.stdout = _PrintedLines(stdout, recorders[0].now if recorders else lambda: 0.0)
        try:
            runner.run(namespace["main"]())
        finally:
            sys.stdout = stdout
    if recorders and trace is not None:
        document = recorders[0].trace()
        document["traceEvents"] += [{"name": f"print: {line}", "cat": "quiz", "ph": "i", "s": "t",
                                     "ts": ts, "pid": 1, "tid": 1} for ts, line in printed.lines]
        from tinyloop.trace import chrome
        chrome.write(document, trace)


def run_batch(loop: str, programs: list[str], folder: str) -> None:
    """Run and record each of ``programs`` on a new ``loop`` of its own, one after another.

    For each ``NAME.py``: ``folder/NAME.out`` holds what it printed and
    ``folder/NAME.json`` its trace, or ``folder/NAME.err`` the one line of
    its exception.  One interpreter for many programs: the book records
    several quizzes per loop this way.  Raises ImportError when the loop
    is not installed.
    """
    import contextlib
    from pathlib import Path
    loop_factory(loop)  # ImportError before any program runs
    for program in programs:
        stem = Path(folder) / Path(program).stem
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                run(loop, program, f"{stem}.json")
        except Exception as error:
            Path(f"{stem}.err").write_text(f"{type(error).__name__}: {error}\n")
        else:
            Path(f"{stem}.out").write_text(printed.getvalue())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--batch"] and len(args) >= 4:
        try:
            run_batch(args[2], args[3:], args[1])
        except ImportError as error:
            print(f"{args[2]} is not installed here: {str(error).splitlines()[0]}", file=sys.stderr)
            return UNAVAILABLE
        return 0
    trace = None
    virtual = "--virtual-clock" in args
    if virtual:
        args.remove("--virtual-clock")
    if "--trace" in args and args.index("--trace") + 1 < len(args):
        at = args.index("--trace")
        trace = args[at + 1]
        del args[at:at + 2]
    if len(args) != 2 or args[0] not in FACTORIES:
        print(f"usage: python -m tinyloop.quiz.runner [--trace FILE] [--virtual-clock] "
              f"{{{'|'.join(FACTORIES)}}} PROGRAM", file=sys.stderr)
        return 2
    loop, program = args
    try:
        run(loop, program, trace, virtual)
    except ImportError as error:
        print(f"{loop} is not installed here: {str(error).splitlines()[0]}", file=sys.stderr)
        return UNAVAILABLE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
