"""The proactor: where tinyloop.ring hands the kernel its operations and reaps their completions.

CPython's ProactorEventLoop (Lib/asyncio/proactor_events.py, on Windows'
I/O completion ports in windows_events.py) puts an object it calls the
proactor where the selector loop has its selector: the loop's iteration
still calls ``select(timeout)``, but that call now waits for operations
to *finish*, not for descriptors to become ready.  This is that object on
io_uring(7), built on Part VI's :class:`tinyloop.raw.uring.Ring`:

    Part III's selector                     this proactor
    ------------------------------------    ------------------------------------------
    register(fd, EVENT_READ, data)          the same table, and a POLL_ADD operation
                                            armed for fd: readiness as a completion
    select(timeout): epoll_wait(2)          select(timeout): one io_uring_enter(2) that
                                            submits every SQE prepared since the last
                                            one and waits for a completion or the timer
    returns the ready descriptors           runs each CQE's completion callback, and
                                            returns the descriptors whose POLL_ADD fired

So Part II's iteration (compute timeout, wait, process events, run the
ready queue) runs unchanged on top of it: ``add_reader`` on any
descriptor, the self-pipe of ``call_soon_threadsafe`` and signals, pipes
and subprocesses all work through POLL_ADD, while the socket transports
(tinyloop/ring/loop.py) submit receives, sends and accepts themselves
with :meth:`recv`, :meth:`send` and :meth:`accept`.

Rules this module keeps:
  * Every submission gets a fresh user_data, never reused: a completion
    that arrives after its operation was cancelled, or after its
    descriptor was closed and the number given to another socket, finds
    its own entry or none, never someone else's.
  * The table of outstanding operations holds each completion callback
    until the operation's final CQE.  The callback is a bound method of
    whoever submitted it, and that object holds the buffer: so a buffer
    lives at least as long as the kernel may write into it or read from it,
    whatever its transport has been told meanwhile (closed, aborted,
    collected).
  * A completion callback runs inside :meth:`select`, in the loop's step 2:
    it must not raise and must not call user code.  It records the result
    and puts a handle on the ready queue; protocols hear of it in step 4,
    as from a selector's readiness.
  * The ring is made in the thread that first uses it, and only that
    thread may use it afterwards (Ring sets IORING_SETUP_SINGLE_ISSUER;
    another thread's io_uring_enter gets EEXIST).  Another thread wakes
    the loop through the self-pipe, never through the ring.
  * Cancellation is a request: :meth:`cancel` submits an
    IORING_OP_ASYNC_CANCEL, and the target's own completion, which may
    carry data or a result after all, is still delivered to its callback.
  * The flight recorder (tinyloop.trace) hears each SQE as it is
    prepared, each io_uring_enter with the count the kernel took, and each
    CQE before its callback (:meth:`_observe`); every hook site tests one
    attribute first, so a loop with no instrument pays nothing more.

Sources: io_uring(7), io_uring_enter(2) (IORING_OP_POLL_ADD,
IORING_OP_TIMEOUT, IORING_OP_ASYNC_CANCEL, IORING_OP_NOP); CPython's
Lib/asyncio/proactor_events.py and windows_events.py (IocpProactor).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import select
import selectors
import threading
import time
from collections.abc import Callable, Sized
from typing import Any

from tinyloop.raw.uring import (CQE_F_MORE, IORING_OP_ACCEPT, IORING_OP_TIMEOUT, BufferRing, Ring,
                                bytes_address, timespec)
from tinyloop.trace.instrument import InstrumentSet

__all__ = ["Completion", "Proactor", "IORING_OP_CONNECT", "IORING_OP_NOP", "IORING_OP_POLL_ADD",
           "os_error", "pin"]

# Opcodes beyond the raw stage's (enum io_uring_op in <linux/io_uring.h>).
IORING_OP_NOP = 0
IORING_OP_POLL_ADD = 6
IORING_OP_CONNECT = 16

Completion = Callable[[int, int], None]
"""A completion callback: ``callback(res, flags)``, res the operation's result or -errno."""

# user_data 0 marks the operations whose completion nobody waits for: the
# cancel requests (their targets' CQEs tell the story) and the NOP that
# makes a zero-timeout wait return.
_NOBODY = 0

# The timer that bounds a wait is armed again only when it would fire
# later than this many seconds after the deadline asked for; an earlier
# wake-up is harmless (the loop computes its timeout again).
_TIMER_SLACK = 0.001

# The group id the receives name for the proactor's provided buffers (the ring has one group).
_BUFFER_GROUP = 1

_POLLIN, _POLLOUT = select.POLLIN, select.POLLOUT
_POLL_ERROR = select.POLLERR | select.POLLHUP
_EVENT_READ, _EVENT_WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class Proactor(selectors._BaseSelectorImpl):
    """A selector whose wait is io_uring_enter(2), and which also submits operations.

    ``entries`` is the submission queue's size (the completion queue is
    four times that: tinyloop.raw.uring.Ring).  The key table, ``get_key``,
    ``get_map`` and ``modify`` are the standard library's
    (selectors._BaseSelectorImpl); registering a descriptor arms a one-shot
    IORING_OP_POLL_ADD for it, armed again after each time it fires, which
    is level-triggered readiness as epoll gives it.  Raises OSError at the
    first use where io_uring is refused (tinyloop.raw.uring.unavailable).
    """

    _fd_to_key: dict[int, selectors.SelectorKey]  # selectors' own table (its _BaseSelectorImpl)

    # The ring this proactor drives, made by ring_type(entries), and how it
    # finds a bytes object's address: the pure-Python ones of Part VI's
    # first half.  tinyloop/ring/core.py's CythonProactor puts liburing's
    # in their place, and a select in C that runs Ring.complete.
    ring_type: Callable[[int], Any] = Ring
    bytes_address = staticmethod(bytes_address)
    # The provided buffers transports receive into (tinyloop.raw.uring.BufferRing, made with
    # the ring): how many, and their size in bytes.  Their memory is the loop's, not a
    # connection's: an idle connection's receive holds none (the completion chapter).
    buffer_type: Callable[..., Any] = BufferRing
    buffer_count = 64
    buffer_size = 64 * 1024

    def __init__(self, entries: int = 256) -> None:
        super().__init__()
        self.entries = entries
        self._ring: Ring | None = None
        self._thread: int | None = None
        self._buffers: BufferRing | None = None  # made with the ring (the ``ring`` property)
        # The state, all of it:
        self._operations: dict[int, Completion] = {}  # user_data -> completion callback, until its CQE
        self._ids = itertools.count(1)                # user_data of the next submission
        self._polls: dict[int, int] = {}              # fd -> user_data of its armed POLL_ADD
        self._to_arm: set[int] = set()                # registered fds whose POLL_ADD is to be armed
        self._events: list[tuple[selectors.SelectorKey, int]] = []  # what this wait's polls found
        self._timer = 0                                # user_data of the armed wait timer, or 0
        self._timer_deadline = 0.0                     # when it fires, on time.monotonic()
        self._timespec = timespec(0)                   # its interval (the kernel copies it at submission)
        self._timespec_at, self._timespec_pin = pin(self._timespec)
        self._timer_completed = False                  # did the wait timer complete in this wait?
        # The loop's ready queue (tinyloop/ring/loop.py gives it), or None: a
        # wait whose completions queued nothing and found no readiness waits again.
        self.ready: Sized | None = None
        # tinyloop.trace: the loop's InstrumentSet, or None (Loop.add_instrument keeps it in step).
        self._instrument: InstrumentSet | None = None

    # -- The ring, made in the loop's thread -------------------------------------------

    @property
    def ring(self) -> Ring:
        """The io_uring instance, made on first use with its provided buffers; RuntimeError from another thread.

        Raises OSError where io_uring or the provided-buffer ring is refused
        (tinyloop.ring.loop.refusal says which, before a loop is made).
        """
        ring = self._ring
        if ring is None:
            ring = self.ring_type(self.entries)
            try:
                self._buffers = self.buffer_type(ring, _BUFFER_GROUP, self.buffer_count, self.buffer_size)
            except BaseException:
                ring.close()
                raise
            self._ring = ring
            self._thread = threading.get_ident()
        elif self._thread != threading.get_ident():
            raise RuntimeError("a tinyloop.ring loop runs only in the thread that first ran it "
                               "(its ring is IORING_SETUP_SINGLE_ISSUER)")
        return ring

    def _submission(self, callback: Completion) -> int:
        user_data = next(self._ids)
        self._operations[user_data] = callback
        return user_data

    # -- Operations: each returns the user_data that names it (for cancel) ------------

    def recv(self, fd: int, address: int, length: int, callback: Completion) -> int:
        """Receive at most ``length`` bytes into the buffer at ``address`` (recv(2)).

        ``callback(res, flags)`` gets the byte count, 0 at EOF, or -errno.
        The caller keeps the buffer alive and unmoved until then.
        """
        user_data = self._submission(callback)
        self.ring.prep_recv(fd, address, length, user_data)
        if self._instrument is not None:
            self._observe(user_data, "RECV", fd)
        return user_data

    @property
    def buffers(self) -> BufferRing:
        """The provided buffers :meth:`recv_provided` receives into (made with the ring)."""
        self.ring  # (made together)
        assert self._buffers is not None
        return self._buffers

    def recv_provided(self, fd: int, callback: Completion) -> int:
        """Receive into one of :attr:`buffers`, which the kernel takes only when data arrives.

        ``callback(res, flags)`` gets the byte count, with CQE_F_BUFFER and
        the buffer's id in ``flags`` (tinyloop.raw.uring.buffer_id): it
        copies the data out and recycles the buffer, at once; 0 at EOF;
        -ENOBUFS if every buffer was taken (nothing was received: submit
        again); or another -errno.
        """
        buffers = self.buffers
        user_data = self._submission(callback)
        self.ring.prep_recv_select(fd, buffers.group, user_data)
        if self._instrument is not None:
            self._observe(user_data, "RECV", fd)
        return user_data

    def send(self, fd: int, address: int, length: int, callback: Completion) -> int:
        """Send ``length`` bytes from ``address`` (send(2), MSG_NOSIGNAL); res: bytes sent, maybe fewer."""
        user_data = self._submission(callback)
        self.ring.prep_send(fd, address, length, user_data)
        if self._instrument is not None:
            self._observe(user_data, "SEND", fd)
        return user_data

    def accept(self, fd: int, address: int, length_address: int, flags: int,
               callback: Completion) -> int:
        """accept4(2) on listener ``fd``: the peer's sockaddr into ``address``, its
        length into the socklen_t at ``length_address``; res: the new descriptor."""
        user_data = self._submission(callback)
        # The SQE's off field is addr2 for an accept: where the length lives.
        self.ring.prep(IORING_OP_ACCEPT, fd, addr=address, offset=length_address,
                       op_flags=flags, user_data=user_data)
        if self._instrument is not None:
            self._observe(user_data, "ACCEPT", fd)
        return user_data

    def connect(self, fd: int, address: int, length: int, callback: Completion) -> int:
        """connect(2) ``fd`` to the sockaddr of ``length`` bytes at ``address``; res 0 or -errno."""
        user_data = self._submission(callback)
        self.ring.prep(IORING_OP_CONNECT, fd, addr=address, offset=length, user_data=user_data)
        if self._instrument is not None:
            self._observe(user_data, "CONNECT", fd)
        return user_data

    def cancel(self, user_data: int) -> None:
        """Ask the kernel to cancel operation ``user_data`` (IORING_OP_ASYNC_CANCEL).

        A request, not a fact: the operation's own completion still comes
        to its callback, with -ECANCELED, or with the result it reached
        before the request did.  Nothing happens if it has completed already.
        """
        if user_data in self._operations:
            self.ring.prep_cancel(user_data, _NOBODY)
            if self._instrument is not None:
                self._observe(_NOBODY, "ASYNC_CANCEL", -1, user_data)

    def outstanding(self) -> int:
        """How many operations have been submitted (or prepared) and not yet completed."""
        return len(self._operations)

    # -- Readiness through POLL_ADD: the selector's interface ----------------------------

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        """Watch ``fileobj`` for ``events`` (EVENT_READ, EVENT_WRITE): its POLL_ADD is armed at the next wait.

        Returns the SelectorKey; raises KeyError if it is registered
        already, ValueError for a bad mask or descriptor (selectors' rules).
        """
        key = super().register(fileobj, events, data)
        self._to_arm.add(key.fd)  # armed at the next wait, in the loop's thread
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        """Stop watching ``fileobj``: its armed POLL_ADD is cancelled.  Returns its key; KeyError if unknown."""
        key = super().unregister(fileobj)
        self._to_arm.discard(key.fd)
        user_data = self._polls.pop(key.fd, 0)
        if user_data and self._thread == threading.get_ident():
            # (From another thread, only close() may come: closing the ring cancels it.)
            self.cancel(user_data)
        return key

    def _arm_polls(self) -> None:
        keys = self._fd_to_key
        for fd in self._to_arm:
            key = keys.get(fd)
            if key is None or fd in self._polls:
                continue
            mask = ((_POLLIN if key.events & _EVENT_READ else 0)
                    | (_POLLOUT if key.events & _EVENT_WRITE else 0))
            user_data = next(self._ids)
            self._operations[user_data] = self._polled_callback(fd, user_data)
            self._polls[fd] = user_data
            # poll32_events is the SQE's op_flags field (io_uring_enter(2), IORING_OP_POLL_ADD).
            self.ring.prep(IORING_OP_POLL_ADD, fd, op_flags=mask, user_data=user_data)
            if self._instrument is not None:
                self._observe(user_data, "POLL_ADD", fd)
        self._to_arm.clear()

    def _polled_callback(self, fd: int, user_data: int) -> Completion:
        def polled(res: int, flags: int) -> None:
            if self._polls.get(fd) != user_data:
                return  # unregistered, or registered again since: a stale poll
            del self._polls[fd]
            if res == -errno.EBADF:
                return  # closed without unregistering: epoll would forget it too
            key = self._fd_to_key.get(fd)
            if key is None:
                return
            self._to_arm.add(fd)  # level-triggered: armed again after its handlers have run
            if res < 0:
                res = _POLL_ERROR  # the poll failed: let the handler's own call find out why
            events = ((_EVENT_READ if res & (_POLLIN | _POLL_ERROR) else 0)
                      | (_EVENT_WRITE if res & (_POLLOUT | _POLL_ERROR) else 0)) & key.events
            if events:
                self._events.append((key, events))
        return polled

    # -- The wait ----------------------------------------------------------------------

    def _arm_timer(self, timeout: float) -> None:
        """Make sure a timer operation completes within ``timeout`` seconds from now."""
        deadline = time.monotonic() + timeout
        if self._timer and self._timer_deadline <= deadline + _TIMER_SLACK:
            return  # the armed one ends this wait in time (or early, which is harmless)
        if self._timer:
            self.cancel(self._timer)  # it would fire too late
        self._timer_deadline = deadline
        self._timespec[:] = timespec(timeout)  # (same length: the pinned buffer does not move)
        self._timer = self._submission(self._timer_fired)
        self.ring.prep(IORING_OP_TIMEOUT, -1, addr=self._timespec_at, length=1, user_data=self._timer)
        if self._instrument is not None:
            self._observe(self._timer, "TIMEOUT", -1)

    def _timer_fired(self, res: int, flags: int) -> None:
        # -ETIME when it expired, -ECANCELED when replaced: either way,
        # clear it only if it is still the armed one, and end this wait.
        self._timer_completed = True
        if self._timer and self._timer not in self._operations:
            self._timer = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """Submit what was prepared, wait up to ``timeout`` seconds (None: until a
        completion), run each completion's callback; return the descriptors
        whose POLL_ADD fired, as ``(key, events)``, for Part II's step 3.

        One io_uring_enter(2) per wait.  The bound is a timer operation
        (IORING_OP_TIMEOUT) whose completion ends the wait; a zero timeout
        is a NOP, which completes at once, so that the call still reaps
        what has finished (with DEFER_TASKRUN the kernel posts completions
        only inside an io_uring_enter that asks for events).  When every
        completion a wait brought was settled in its callback (a whole
        send, a cancel), queuing nothing on the loop's ready queue (``self.ready``) and firing no
        poll, the call waits again instead of returning: there is nothing
        for the loop's other steps to do.

        Discussion: with one client, the send a request's answer makes is
        done inside the io_uring_enter that submits it, so that call returns
        at once with its CQE, and the client's next request has not come
        yet.  Returning there would cost the loop a whole iteration (timers,
        ready queue) for a completion that needs none.
        """
        ring = self.ring
        if self._to_arm:
            self._arm_polls()
        if timeout is not None:
            if timeout <= 0:
                ring.prep(IORING_OP_NOP, -1, user_data=_NOBODY)
                if self._instrument is not None:
                    self._observe(_NOBODY, "NOP", -1)
            else:
                self._arm_timer(timeout)
        self._timer_completed = False
        while True:
            instrument = self._instrument
            if instrument is not None:  # tinyloop.trace: the batch this call submits
                instrument.before_enter()
            submitted = 0
            interrupted = False
            try:
                submitted = ring.submit_and_wait(1)
            except InterruptedError:
                interrupted = True  # a signal: its byte is in the self-pipe, whose POLL_ADD will say so
            if instrument is not None:
                instrument.after_enter(submitted)
            events = self._events = []
            self._complete(ring)
            if (events or interrupted or self._timer_completed or self.ready is None or self.ready
                    or (timeout is not None and timeout <= 0)):
                return events

    def _complete(self, ring: Ring) -> None:
        """Run each posted completion's callback, oldest first (the loop's step 2, continued).

        A CQE with CQE_F_MORE (a multishot operation, still armed) leaves
        its callback in the table; any other is the operation's last and
        takes it out.  A CQE nobody waits for (user_data 0) is only reaped.
        """
        operations = self._operations
        for user_data, res, flags in ring.completions():
            if flags & CQE_F_MORE:
                callback = operations.get(user_data)
            else:
                callback = operations.pop(user_data, None)
            if callback is not None:
                callback(res, flags)

    def _observe(self, user_data: int, opcode: str, fd: int, target: int = 0) -> None:
        """tinyloop.trace: tell the instruments of the SQE just prepared, and of its completions to come.

        Called only with an instrument attached (the hook sites test
        ``_instrument`` first).  The operation's callback is wrapped, so that
        each of its CQEs reaches ``cqe_reaped`` just before the callback
        runs, whichever core runs the completion loop (``_complete`` here,
        or Ring.complete in C, tinyloop/ring/_uring.pyx).  Completions nobody waits
        for (user_data 0: a cancel, the NOP of a zero-timeout wait) are
        counted by the ring alone.
        """
        instrument = self._instrument
        if instrument is None:
            return
        instrument.sqe_prepared(user_data, opcode, fd, target)
        callback = self._operations.get(user_data) if user_data else None
        if callback is None:
            return

        def reaped(res: int, flags: int) -> None:
            # (The set, not self: no cycle through the table; a removed instrument is out of it.)
            instrument.cqe_reaped(user_data, res, flags)
            callback(res, flags)

        self._operations[user_data] = reaped

    def close(self) -> None:
        """Close the ring (the kernel cancels every outstanding operation) and forget the keys."""
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        if self._buffers is not None:  # (after the ring: the kernel no longer writes into them)
            self._buffers.close()
            self._buffers = None
        self._operations.clear()
        self._polls.clear()
        super().close()


def pin(buffer: Any) -> tuple[int, ctypes.c_char]:
    """The address of the writable ``buffer``'s first byte, and the ctypes object that pins it.

    What tinyloop.raw.uring.address_of does, through the one ctypes type
    ``c_char`` instead of an array type per length: ctypes keeps array
    types only while an instance lives, and a type is a reference cycle,
    so a loop pinning buffers of many lengths would leave garbage for the
    cyclic GC at every one.  ValueError for an empty buffer.
    """
    first = ctypes.c_char.from_buffer(buffer)
    return ctypes.addressof(first), first


def os_error(res: int) -> OSError:
    """The OSError (subclass: ConnectionResetError, ...) for a CQE's negative ``res``."""
    return OSError(-res, os.strerror(-res))
