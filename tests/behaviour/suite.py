"""The shared behaviour tests of the Part II loops; see ``behaviour/__init__.py`` for the adapter."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from fakes import FakeSelector, VirtualClock


class LoopBehaviour:
    """Mixin: behaviour every Part II loop keeps.  Subclasses supply the adapter."""

    # -- the adapter (see the package docstring) ----------------------------------

    def make_loop(self) -> None:
        raise NotImplementedError

    def close_loop(self) -> None:
        raise NotImplementedError

    def soon(self, fn: Callable[[], object]) -> Any:
        raise NotImplementedError

    def schedule(self, delay: float, fn: Callable[[], object]) -> Any:
        raise NotImplementedError

    def wait_readable(self, sock: socket.socket, fn: Callable[[], object]) -> Any:
        raise NotImplementedError

    def cancel(self, token: Any) -> None:
        raise NotImplementedError

    def run_until_idle(self) -> None:
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    # -- fixtures and helpers ---------------------------------------------------------

    def setup_method(self) -> None:
        self.clock = VirtualClock()
        self.selector = FakeSelector(self.clock)
        self.errors: list[BaseException] = []
        self._sockets: list[socket.socket] = []
        self.make_loop()

    def teardown_method(self) -> None:
        self.close_loop()
        for sock in self._sockets:
            sock.close()

    def socketpair(self) -> tuple[socket.socket, socket.socket]:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        self._sockets += [a, b]
        return a, b

    def make_readable(self, sock: socket.socket, peer: socket.socket) -> None:
        peer.send(b"x")
        self.selector.set_ready(sock)

    def record(self, log: list[Any], item: Any) -> Callable[[], None]:
        """A function that appends ``item`` to ``log`` when called."""
        return lambda: log.append(item)

    # -- ready work -------------------------------------------------------------------

    def test_soon_runs_in_the_order_scheduled(self) -> None:
        log: list[str] = []
        for name in "abcde":
            self.soon(self.record(log, name))
        self.run_until_idle()
        assert log == list("abcde")

    def test_work_scheduled_while_running_runs_after_work_already_queued(self) -> None:
        log: list[str] = []

        def a() -> None:
            log.append("a")
            self.soon(self.record(log, "c"))

        self.soon(a)
        self.soon(self.record(log, "b"))
        self.run_until_idle()
        assert log == ["a", "b", "c"]

    # -- timers -----------------------------------------------------------------------

    def test_timers_fire_in_deadline_order(self) -> None:
        log: list[float] = []
        for delay in (0.3, 0.1, 0.5, 0.2, 0.4):
            self.schedule(delay, self.record(log, delay))
        self.run_until_idle()
        assert log == [0.1, 0.2, 0.3, 0.4, 0.5]

    def test_timers_with_the_same_deadline_fire_in_the_order_scheduled(self) -> None:
        log: list[int] = []
        for i in range(10):
            self.schedule(0.25, self.record(log, i))
        self.run_until_idle()
        assert log == list(range(10))

    def test_a_timer_does_not_fire_before_its_time(self) -> None:
        fired_at: list[float] = []
        self.schedule(1.5, lambda: fired_at.append(self.now()))
        self.run_until_idle()
        assert len(fired_at) == 1
        assert fired_at[0] >= 1.5
        assert fired_at[0] < 1.5 + 1e-6  # and the loop did not oversleep

    def test_a_timer_in_the_past_fires_on_the_next_run(self) -> None:
        log: list[str] = []
        self.schedule(0, self.record(log, "zero"))
        self.schedule(-5, self.record(log, "negative"))
        self.run_until_idle()
        assert sorted(log) == ["negative", "zero"]
        assert self.now() < 1e-6  # nothing made the loop wait

    # -- cancellation -----------------------------------------------------------------

    def test_cancelled_timer_never_fires(self) -> None:
        log: list[str] = []
        token = self.schedule(0.1, self.record(log, "cancelled"))
        self.schedule(0.2, self.record(log, "kept"))
        self.cancel(token)
        self.run_until_idle()
        assert log == ["kept"]

    def test_cancelled_soon_never_runs(self) -> None:
        log: list[str] = []
        token = self.soon(self.record(log, "cancelled"))
        self.soon(self.record(log, "kept"))
        self.cancel(token)
        self.run_until_idle()
        assert log == ["kept"]

    def test_a_callback_can_cancel_a_later_timer(self) -> None:
        log: list[str] = []
        victim = self.schedule(0.2, self.record(log, "victim"))
        self.schedule(0.1, lambda: (log.append("killer"), self.cancel(victim)))
        self.run_until_idle()
        assert log == ["killer"]

    def test_many_cancelled_timers_leave_the_live_ones_in_order(self) -> None:
        log: list[int] = []
        tokens = [self.schedule(0.001 * i, self.record(log, i)) for i in range(300)]
        for i, token in enumerate(tokens):
            if i % 3:
                self.cancel(token)
        self.run_until_idle()
        assert log == list(range(0, 300, 3))

    def test_cancelling_twice_or_after_running_is_harmless(self) -> None:
        log: list[str] = []
        token = self.schedule(0.1, self.record(log, "ran"))
        self.run_until_idle()
        self.cancel(token)
        self.cancel(token)
        self.run_until_idle()
        assert log == ["ran"]
        assert self.errors == []

    # -- I/O readiness ------------------------------------------------------------------

    def test_io_work_waits_for_readiness(self) -> None:
        a, b = self.socketpair()
        log: list[str] = []
        self.wait_readable(a, self.record(log, "readable"))
        self.run_until_idle()
        assert log == []
        self.make_readable(a, b)
        self.run_until_idle()
        assert log == ["readable"]
        assert not self.selector.is_registered(a)

    def test_cancelled_io_wait_never_runs_and_stops_watching(self) -> None:
        a, b = self.socketpair()
        log: list[str] = []
        token = self.wait_readable(a, self.record(log, "readable"))
        self.run_until_idle()
        self.cancel(token)
        self.run_until_idle()
        assert not self.selector.is_registered(a)
        self.make_readable(a, b)
        self.run_until_idle()
        assert log == []

    def test_io_waits_on_two_sockets_wake_independently(self) -> None:
        (a, a_peer), (c, c_peer) = self.socketpair(), self.socketpair()
        log: list[str] = []
        self.wait_readable(a, self.record(log, "a"))
        self.wait_readable(c, self.record(log, "c"))
        self.run_until_idle()
        self.make_readable(c, c_peer)
        self.run_until_idle()
        assert log == ["c"]
        self.make_readable(a, a_peer)
        self.run_until_idle()
        assert log == ["c", "a"]

    # -- errors -------------------------------------------------------------------------

    def test_an_error_is_reported_and_the_loop_goes_on(self) -> None:
        log: list[str] = []

        def boom() -> None:
            raise ZeroDivisionError("boom")

        self.soon(boom)
        self.soon(self.record(log, "after soon"))
        self.schedule(0.1, self.record(log, "after timer"))
        self.run_until_idle()
        assert log == ["after soon", "after timer"]
        assert [type(error) for error in self.errors] == [ZeroDivisionError]

    def test_an_error_in_a_timer_is_reported_and_later_timers_fire(self) -> None:
        log: list[str] = []

        def boom() -> None:
            raise ValueError("in a timer")

        self.schedule(0.1, boom)
        self.schedule(0.2, self.record(log, "later"))
        self.run_until_idle()
        assert log == ["later"]
        assert len(self.errors) == 1 and isinstance(self.errors[0], ValueError)

    def test_an_error_in_io_work_is_reported(self) -> None:
        a, b = self.socketpair()
        log: list[str] = []

        def boom() -> None:
            raise KeyError("in I/O work")

        self.wait_readable(a, boom)
        self.schedule(0.5, self.record(log, "timer"))
        self.run_until_idle()
        self.make_readable(a, b)
        self.run_until_idle()
        assert log == ["timer"]
        assert len(self.errors) == 1 and isinstance(self.errors[0], KeyError)

    # -- ordering and fairness ----------------------------------------------------------

    def test_queued_work_runs_before_a_timer_that_became_due(self) -> None:
        log: list[str] = []
        self.soon(self.record(log, "a"))
        self.schedule(0, self.record(log, "timer"))
        self.soon(self.record(log, "b"))
        self.run_until_idle()
        assert log == ["a", "b", "timer"]

    def test_queued_work_runs_before_io_that_became_ready(self) -> None:
        a, b = self.socketpair()
        log: list[str] = []
        self.make_readable(a, b)
        self.soon(self.record(log, "first"))
        self.wait_readable(a, self.record(log, "io"))
        self.soon(self.record(log, "second"))
        self.run_until_idle()
        assert log == ["first", "second", "io"]

    def test_work_that_reschedules_itself_does_not_starve_timers(self) -> None:
        log: list[str] = []
        spins = [0]

        def spin() -> None:
            spins[0] += 1
            if "timer" not in log and spins[0] < 1000:
                self.soon(spin)

        self.soon(spin)
        self.schedule(0, self.record(log, "timer"))
        self.run_until_idle()
        assert log == ["timer"]
        assert spins[0] < 10

    def test_work_that_reschedules_itself_does_not_starve_io(self) -> None:
        a, b = self.socketpair()
        log: list[str] = []
        spins = [0]

        def spin() -> None:
            spins[0] += 1
            if "io" not in log and spins[0] < 1000:
                self.soon(spin)

        self.wait_readable(a, self.record(log, "io"))
        self.soon(spin)
        self.make_readable(a, b)
        self.run_until_idle()
        assert log == ["io"]
        assert spins[0] < 10
