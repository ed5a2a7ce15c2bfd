"""One behaviour suite for every loop the book builds: ``callbacks``, ``generators``,
``yieldfrom``, ``coroutines``, ``aio`` (and later ``uv``), with stdlib asyncio
as the reference row.

The loops schedule different things (a callback, a generator task, a
coroutine task, an asyncio Task) but promise the same behaviour: timers fire
in deadline order, cancelled work never runs, I/O work waits for readiness,
an error is reported and the loop goes on, work already queued runs before
newly due timers and newly ready I/O, and nothing starves the rest.  The
suite states those promises once, in terms of plain functions; each loop
supplies an *adapter* that turns "run this function" into its own unit of
work.

The rows come from the stage registry.  A stage whose ``loop`` field (in
``tinyloop/stages.py``) names a loop factory needs an adapter in
:mod:`behaviour.adapters` (``ADAPTERS``, keyed by the stage's name) and a
test module that runs the suite with it; ``tests/test_behaviour_registry.py``
checks both.  A loop that keeps its own clock and poller (``fakes=False``
in its row: Part IV's, on libuv) cannot be handed the fakes and has no
adapter; the conformance suite (``tests/conformance/``) is its row instead.
A row is a class::

    from behaviour import LoopBehaviour
    from behaviour.adapters import Callbacks

    class TestCallbacksBehaviour(Callbacks, LoopBehaviour):
        pass

Before each test the suite creates ``self.clock`` (a :class:`fakes.VirtualClock`),
``self.selector`` (a :class:`fakes.FakeSelector` on that clock) and
``self.errors`` (an empty list), then calls ``make_loop()``, which builds the
stage's loop by calling its registry factory with ``selector=`` and
``clock=``.  After each test it calls ``close_loop()`` and closes the sockets
it made.

The adapter (every method is required):

``make_loop() -> None``
    Build the stage's loop on ``self.selector`` and ``self.clock`` and keep it
    where the other methods find it.  Arrange that every error the stage
    reports (through its exception handler) appends the exception object to
    ``self.errors``.
``close_loop() -> None``
    Close the loop (and anything ``make_loop`` opened).
``soon(fn) -> token``
    Arrange for ``fn()`` to run once, as soon as possible: ``call_soon(fn)``,
    or a new task whose body calls ``fn()``.
``schedule(delay, fn) -> token``
    Arrange for ``fn()`` to run once, after ``delay`` seconds (>= 0) on the
    loop's clock: ``call_later``, or a new task that sleeps ``delay`` seconds
    and then calls ``fn()``.
``wait_readable(sock, fn) -> token``
    Arrange for ``fn()`` to run once, after ``sock`` becomes readable, and for
    the loop to stop watching ``sock`` after that (or after ``cancel``).
``cancel(token) -> None``
    Cancel what ``soon``, ``schedule`` or ``wait_readable`` returned: ``fn``
    must then never run, and the loop must stop watching any socket for it
    (by the end of the next ``run_until_idle``).
``run_until_idle() -> None``
    Run the loop until it has nothing left to do: no ready work, no live
    timer, no scripted readiness (``fakes.run_until_idle`` does this for a
    loop built on :class:`tinyloop.callbacks.loop.Loop`).  Errors the stage
    reports late (e.g. a task's exception that nobody retrieved, reported
    when the task is garbage collected) must be in ``self.errors`` by the time
    it returns.
``now() -> float``
    The loop's time (seconds on ``self.clock``).

Helpers the suite gives the tests: ``self.socketpair()`` (two connected
non-blocking sockets, closed after the test) and ``self.make_readable(sock,
peer)`` (send a byte from ``peer`` and script ``sock`` readable).
"""

from behaviour.suite import LoopBehaviour

__all__ = ["LoopBehaviour"]
