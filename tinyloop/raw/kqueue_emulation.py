"""select.kqueue's API on Linux, built on epoll(7), so that the kqueue server,
and any program written against ``select.kqueue``, runs and is tested here
as it would on FreeBSD or macOS.  ``kqueue_api()`` at the end of the file is
the one platform switch: the real ``select`` module where kqueue exists,
this module where only epoll does.

Rules this file keeps:
  * Same names, numbers and errors as ``select.kqueue``.  The constants are
    those of <sys/event.h>; a change that fails is reported as kevent(2)
    reports it (an EV_ERROR event, or OSError when the event list has no
    room); control() checks its arguments as CPython's does.
  * One epoll item per kqueue registration, so each (ident, filter) pair
    has its own mode, enabled state and user data, exactly as in kqueue.
  * Where Linux cannot give what kqueue gives, the emulation says so below
    ("What is not exact") rather than guessing quietly.
  * Standard library only.  One thread per kqueue, as with any poller here.

Some facts about kqueue and epoll
---------------------------------
Both keep the interest list in the kernel and hand back only what is
ready: O(ready) per call, not O(registered) like select(2) and poll(2).
They differ in what a registration *is*:

  * kqueue registers an (ident, filter) pair.  Reading and writing on one
    socket are two registrations ("knotes"), EVFILT_READ and EVFILT_WRITE,
    each with its own flags (EV_ONESHOT, EV_CLEAR), its own enabled or
    disabled state and its own udata.  epoll registers a descriptor once,
    as one item with one bit mask (EPOLLIN | EPOLLOUT) and one set of mode
    flags (EPOLLET, EPOLLONESHOT) shared by both directions.
  * kqueue changes and waits in one system call: kevent(2) takes a change
    list and returns an event list, so a server batches its changes into its
    next wait.  epoll pays one epoll_ctl(2) per change, then epoll_wait(2).
  * EV_CLEAR is edge-triggering, like EPOLLET: the event is reported, its
    state reset, and it is reported again only when the filter triggers
    again (new data, new room).  EV_ONESHOT deletes the registration after
    one delivery; EPOLLONESHOT only disables it, to be re-armed with
    EPOLL_CTL_MOD.  EV_DISABLE keeps a registration that reports nothing.
  * kqueue says how much, not only whether: ``data`` is the number of bytes
    readable (for a listening socket, the connections waiting to be
    accepted) or the room left in the send buffer.  The end of the stream is
    a flag on the read event, EV_EOF, with the bytes still unread in
    ``data``.  epoll reports bits: EPOLLRDHUP (the peer shut down its
    writing side), EPOLLHUP (both directions are down), EPOLLERR (a
    pending error); EPOLLHUP and EPOLLERR are reported whether asked or not.
  * Closing a descriptor removes its knotes (kqueue(2): "Calling close() on
    a file descriptor will remove any kevents that reference the
    descriptor"), so a kqueue server just closes.  epoll drops an item only
    when the open file is released, after every dup() of it is closed
    (epoll(7), Q6), and never tells user space it did.
  * The queue is itself a descriptor in both: it can be polled, and put in
    another epoll instance or kqueue.  Nesting is what makes this file work.

The mapping
-----------
epoll's item is keyed by (epoll instance, descriptor).  The same socket may
therefore sit in two epoll instances with two different masks and modes.
So the emulation keeps one epoll instance per filter: a knote for
(fd, EVFILT_READ) is an item for fd in the READ instance, asking EPOLLIN |
EPOLLRDHUP, and a knote for (fd, EVFILT_WRITE) is an item in the WRITE
instance, asking EPOLLOUT.  Each item carries EPOLLET exactly when its own
knote has EV_CLEAR, so a socket can be edge-triggered for reading and
level-triggered for writing, with no compromise.  (One instance cannot do
that: EPOLLET would apply to both directions.  A level-triggered item could
imitate EV_CLEAR only by guessing which readiness is new; an edge-triggered
one could imitate level-triggering by re-arming with EPOLL_CTL_MOD after
each delivery, but that re-arm also re-reports the other direction.)

A third epoll instance holds the two per-filter instances, level-triggered,
and is the descriptor ``fileno()`` returns: one epoll_wait on it sleeps
until either filter has something.  Then each ready instance is asked, with
a zero timeout, for its events.  When only one filter has registrations, we
wait on its instance directly and save a system call (for a server that
enables write interest only while output is waiting, that is most calls).

  kqueue                       emulation
  EV_ADD (new knote)           EPOLL_CTL_ADD into the filter's instance
  EV_ADD (existing knote)      EPOLL_CTL_MOD: epoll re-checks readiness, as
                               kqueue re-runs the filter; udata is updated
  EV_DELETE, EV_DISABLE        EPOLL_CTL_DEL (a disabled knote lives on in
                               our table only); EV_ENABLE: EPOLL_CTL_ADD
  EV_CLEAR                     EPOLLET on that knote's item
  EV_ONESHOT                   EPOLL_CTL_DEL right after the one delivery
  EV_EOF on EVFILT_READ        EPOLLRDHUP or EPOLLHUP
  EV_EOF on EVFILT_WRITE       EPOLLHUP or EPOLLERR
  data, EVFILT_READ            FIONREAD (bytes queued); for a listening TCP
                               socket, the accept queue's length (TCP_INFO)
  data, EVFILT_WRITE           sockets: SO_SNDBUF - SIOCOUTQ; pipes:
                               F_GETPIPE_SZ - FIONREAD
  close(fd)                    noticed at the next change naming fd: if
                               fstat(fd) shows another file, the old knotes
                               are forgotten (see below)

What is not exact
-----------------
  * ``fflags`` is always 0.  kqueue puts a socket's pending error there;
    reading it on Linux (SO_ERROR) would clear it, and the program's next
    recv() or send() would no longer see it.  The error reaches the program
    there instead.
  * ``data`` is Linux's nearest figure.  SO_SNDBUF counts the kernel's
    bookkeeping too (socket(7): the value is doubled), so the room reported
    for writing is generous; where Linux cannot tell (a Unix-domain listening
    socket, an eventfd) ``data`` is 0.
  * EV_ENABLE of an EV_CLEAR knote reports it at once if its condition holds
    (epoll re-checks readiness whenever an item is added), where kqueue
    reports it only if it triggered while disabled.  Edge-triggered code
    reads until EAGAIN, so the extra event costs one empty read.
  * A knote whose descriptor was closed is forgotten lazily, when a change
    names that descriptor number again (or when the kqueue closes), and a
    descriptor dup()ed before the close keeps reporting events, as in epoll.
  * kqueue returns events in the order they triggered; we return one
    filter's events, then the other's, alternating which comes first so
    that neither starves when ``maxevents`` is small.
  * Only EVFILT_READ and EVFILT_WRITE.  Other filters raise
    NotImplementedError; regular files, which kqueue reports always ready,
    are refused by epoll (EPERM).  EV_RECEIPT, EV_DISPATCH and NOTE_LOWAT
    (``fflags``/``data`` of a change) are not emulated.
  * Returned ``flags`` follow FreeBSD: the knote's flags without EV_ADD,
    EV_DELETE, EV_ENABLE and EV_DISABLE, plus EV_EOF.  Portable code tests
    single bits (``flags & KQ_EV_EOF``), never whole values.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import socket
import stat
import struct
import sys
import termios
import time
from collections.abc import Callable, Iterable
from types import ModuleType

__all__ = [
    "KQ_EV_ADD", "KQ_EV_CLEAR", "KQ_EV_DELETE", "KQ_EV_DISABLE", "KQ_EV_ENABLE", "KQ_EV_EOF",
    "KQ_EV_ERROR", "KQ_EV_FLAG1", "KQ_EV_ONESHOT", "KQ_EV_SYSFLAGS", "KQ_FILTER_READ",
    "KQ_FILTER_WRITE", "kevent", "kqueue", "kqueue_api",
]

# <sys/event.h>, identical on FreeBSD and macOS.
KQ_FILTER_READ = -1        # EVFILT_READ
KQ_FILTER_WRITE = -2       # EVFILT_WRITE

KQ_EV_ADD = 0x0001         # add the knote, or change an existing one
KQ_EV_DELETE = 0x0002      # remove it
KQ_EV_ENABLE = 0x0004      # let it report again
KQ_EV_DISABLE = 0x0008     # keep it, but report nothing
KQ_EV_ONESHOT = 0x0010     # delete after the first delivery
KQ_EV_CLEAR = 0x0020       # reset its state after delivery: edge-triggered
KQ_EV_SYSFLAGS = 0xF000    # reserved for the kernel; ignored in a change
KQ_EV_FLAG1 = 0x2000       # filter-specific
KQ_EV_ERROR = 0x4000       # returned: this change failed; data is the errno
KQ_EV_EOF = 0x8000         # returned: end of stream (READ) or of sending (WRITE)

# The flags a knote keeps from the change that created it (FreeBSD's
# kqueue_register strips the action bits and keeps the rest).
_ACTIONS = KQ_EV_ADD | KQ_EV_DELETE | KQ_EV_ENABLE | KQ_EV_DISABLE

try:
    from select import EPOLLERR, EPOLLET, EPOLLHUP, EPOLLIN, EPOLLOUT, EPOLLRDHUP
except ImportError:  # BSD and macOS: no epoll; kqueue() below says so, select.kqueue is used
    EPOLLERR = EPOLLET = EPOLLHUP = EPOLLIN = EPOLLOUT = EPOLLRDHUP = 0

# struct tcp_info (linux/tcp.h): tcpi_state is the first byte; for a
# listening socket, tcpi_unacked (offset 24) is the accept queue's length.
_TCP_LISTEN = 10
_TCP_INFO_SIZE = 32
_TCPI_UNACKED = 24


class kevent:
    """One change to make, or one event that happened: ``select.kevent``'s twin.

    ``ident`` is a descriptor (an int >= 0, or an object with ``fileno()``);
    ``filter`` is KQ_FILTER_READ or KQ_FILTER_WRITE; ``flags`` a sum of
    KQ_EV_* bits; ``data`` and ``fflags`` are filter-specific (``data`` is a
    byte or connection count in returned events); ``udata`` is an integer the
    kernel hands back untouched.  Kevents compare as the tuple of those six
    fields, in that order, and are unhashable, as in CPython.

    Raises TypeError for a non-integer field, OverflowError for one outside
    its C type (``filter`` short, ``flags`` u_short, ``fflags`` u_int,
    ``data`` intptr_t, ``udata`` uintptr_t).  CPython silently truncates an
    oversized ``flags``, ``fflags`` or ``udata``; the emulation refuses it.
    """

    __slots__ = ("ident", "filter", "flags", "fflags", "data", "udata")

    def __init__(self, ident: object, filter: int = KQ_FILTER_READ, flags: int = KQ_EV_ADD,
                 fflags: int = 0, data: int = 0, udata: int = 0) -> None:
        if not isinstance(ident, int):
            ident = _fileno(ident)
        self.ident = _ranged("ident", ident, 0, 2**64 - 1)
        self.filter = _ranged("filter", filter, -2**15, 2**15 - 1)
        self.flags = _ranged("flags", flags, 0, 2**16 - 1)
        self.fflags = _ranged("fflags", fflags, 0, 2**32 - 1)
        self.data = _ranged("data", data, -2**63, 2**63 - 1)
        self.udata = _ranged("udata", udata, 0, 2**64 - 1)

    def _key(self) -> tuple[int, int, int, int, int, int]:
        return (self.ident, self.filter, self.flags, self.fflags, self.data, self.udata)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, kevent) else NotImplemented

    def __lt__(self, other: object) -> bool:
        return self._key() < other._key() if isinstance(other, kevent) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self._key() <= other._key() if isinstance(other, kevent) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self._key() > other._key() if isinstance(other, kevent) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self._key() >= other._key() if isinstance(other, kevent) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable fields, as select.kevent

    def __repr__(self) -> str:
        return (f"<{__name__}.kevent ident={self.ident} filter={self.filter} flags={self.flags:#x} "
                f"fflags={self.fflags:#x} data={self.data:#x} udata={self.udata:#x}>")


def _fileno(obj: object) -> int:
    """The descriptor behind ``obj``, as CPython's PyObject_AsFileDescriptor finds it."""
    try:
        fileno = obj.fileno  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError("argument must be an int, or have a fileno() method.") from None
    fd = fileno()
    if not isinstance(fd, int):
        raise TypeError("fileno() returned a non-integer")
    if fd < 0:
        raise ValueError(f"file descriptor cannot be a negative integer ({fd})")
    return fd


def _ranged(name: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int):
        raise TypeError(f"kevent {name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise OverflowError(f"kevent {name} {value} is out of range [{low}, {high}]")
    return value


def _oserror(code: int) -> OSError:
    """OSError(code) as the kernel would raise it: FileNotFoundError for ENOENT, and so on."""
    return OSError(code, os.strerror(code))


class _Knote:
    """One registration, kqueue's "knote": what we remember about (ident, filter)."""

    __slots__ = ("ident", "flags", "udata", "enabled", "file")

    def __init__(self, ident: int, flags: int, udata: int, file: os.stat_result) -> None:
        self.ident = ident
        self.flags = flags          # EV_ONESHOT, EV_CLEAR...: fixed when the knote is created
        self.udata = udata
        self.enabled = False        # True exactly while the descriptor is in the filter's epoll
        self.file = file            # fstat() at creation: which file, and what kind


class _Filter:
    """The knotes of one filter and the epoll instance that watches the enabled ones.

    ``asks`` is the epoll mask a knote of this filter registers, ``eof`` the
    epoll bits that mean EV_EOF for it, ``amount(fd, mode)`` computes
    ``kevent.data``.
    """

    def __init__(self, filter: int, asks: int, eof: int, amount: Callable[[int, int], int]) -> None:
        self.filter = filter
        self.asks = asks
        self.eof = eof
        self.amount = amount
        self.epoll = select.epoll()
        self.knotes: dict[int, _Knote] = {}   # ident -> knote
        self.armed = 0                        # how many knotes are enabled

    def arm(self, knote: _Knote) -> None:
        """Put ``knote``'s descriptor in this epoll, or, if it is there, make epoll re-check it."""
        mask = self.asks | (EPOLLET if knote.flags & KQ_EV_CLEAR else 0)
        if knote.enabled:
            try:
                self.epoll.modify(knote.ident, mask)  # EPOLL_CTL_MOD re-polls the file
                return
            except FileNotFoundError:
                pass  # epoll dropped the item (the file was closed, then reopened): add it anew
            knote.enabled = False
            self.armed -= 1
        self.epoll.register(knote.ident, mask)  # raises PermissionError for regular files
        knote.enabled = True
        self.armed += 1

    def disarm(self, knote: _Knote) -> None:
        """Take ``knote``'s descriptor out of this epoll (the knote itself stays, disabled)."""
        if knote.enabled:
            knote.enabled = False
            self.armed -= 1
            try:
                self.epoll.unregister(knote.ident)
            except FileNotFoundError:
                pass  # epoll had already dropped it, because the file was closed

    def remove(self, knote: _Knote) -> None:
        self.disarm(knote)
        del self.knotes[knote.ident]

    def collect(self, timeout: float | None, room: int, events: list[kevent]) -> None:
        """epoll_wait on this filter's instance; append at most ``room`` kevents to ``events``."""
        for fd, mask in self.epoll.poll(timeout, room):
            knote = self.knotes.get(fd)
            if knote is None or not knote.enabled:
                continue  # an item epoll still reports for a knote we dropped (a dup'ed fd)
            flags = knote.flags | (KQ_EV_EOF if mask & self.eof else 0)
            data = self.amount(fd, knote.file.st_mode)
            events.append(kevent(fd, self.filter, flags, 0, data, knote.udata))
            if knote.flags & KQ_EV_ONESHOT:
                self.remove(knote)

    def close(self) -> None:
        self.epoll.close()
        self.knotes.clear()
        self.armed = 0


class kqueue:
    """A kernel event queue, emulated: ``select.kqueue``'s twin on epoll(7).

    Holds three epoll descriptors (one per filter and one that holds both;
    see the header).  ``fileno()`` is the one to poll from outside.  Raises
    NotImplementedError where there is no epoll.
    """

    def __init__(self) -> None:
        if not hasattr(select, "epoll"):
            raise NotImplementedError("the kqueue emulation needs epoll (Linux); "
                                      "use select.kqueue here, see kqueue_api()")
        self._epoll = select.epoll()   # holds the two filter instances: what fileno() returns
        self._filters: dict[int, _Filter] = {}
        try:
            for flt in (_Filter(KQ_FILTER_READ, EPOLLIN | EPOLLRDHUP, EPOLLRDHUP | EPOLLHUP, _readable),
                        _Filter(KQ_FILTER_WRITE, EPOLLOUT, EPOLLHUP | EPOLLERR, _writable)):
                self._filters[flt.filter] = flt
                self._epoll.register(flt.epoll.fileno(), EPOLLIN)
        except BaseException:
            self.close()
            raise
        self._turn = 0   # which filter is collected first; alternates for fairness

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._epoll.closed

    def fileno(self) -> int:
        """The queue's descriptor: readable when an event is pending.  ValueError if closed."""
        self._check_open()
        return self._epoll.fileno()

    def close(self) -> None:
        """Close the queue and forget every registration.  Closing twice is harmless."""
        for flt in self._filters.values():
            flt.close()
        self._epoll.close()

    @classmethod
    def fromfd(cls, fd: int) -> kqueue:
        """Not emulated: the registrations live in this object, which a descriptor cannot carry."""
        raise NotImplementedError("kqueue.fromfd() is not emulated: the emulation keeps its "
                                  "registrations in the Python object, not in the descriptor")

    def _check_open(self) -> None:
        if self._epoll.closed:
            raise ValueError("I/O operation on closed kqueue object")

    def control(self, changelist: Iterable[kevent] | None, maxevents: int,
                timeout: float | None = None, /) -> list[kevent]:
        """Apply ``changelist``, then wait for at most ``maxevents`` events: kevent(2).

        ``changelist`` is an iterable of :class:`kevent` (or None), applied in
        order.  ``maxevents`` >= 0 bounds the returned list; with 0 the call
        only applies the changes and never waits.  ``timeout`` is in seconds
        (int or float); None waits until an event arrives, 0 polls.  Returns a
        list of kevents, ``[]`` on timeout.

        A change that fails becomes an event with KQ_EV_ERROR in ``flags`` and
        the errno in ``data``, and the call returns those error events without
        waiting; when the list has no room left for one, the call raises it
        instead (FileNotFoundError, ENOENT: no such registration; OSError
        EBADF: not an open descriptor), with the changes before it applied and
        those after it not.  This is kevent(2)'s contract.

        Raises ValueError if the queue is closed, ``maxevents`` < 0 or
        ``timeout`` < 0; TypeError for a changelist that is not an iterable
        of kevents; NotImplementedError for a filter other than READ/WRITE.
        """
        self._check_open()
        if not isinstance(maxevents, int):
            raise TypeError(f"maxevents must be an int, not {type(maxevents).__name__}")
        if maxevents < 0:
            raise ValueError(f"Length of eventlist must be 0 or positive, got {maxevents}")
        if timeout is not None:
            if not isinstance(timeout, (int, float)):
                raise TypeError("timeout must be an integer or float or None, "
                                f"not {type(timeout).__name__}")
            if timeout < 0:
                raise ValueError("timeout must be positive or None")
        changes = self._changes(changelist)

        errors: list[kevent] = []
        for change in changes:
            try:
                self._apply(change)
            except OSError as error:
                if len(errors) == maxevents:
                    raise  # no room to report it: kevent(2) fails with it
                errors.append(kevent(change.ident, change.filter, KQ_EV_ERROR,
                                     change.fflags, error.errno or 0, change.udata))
        if errors or maxevents == 0:
            return errors
        return self._wait(maxevents, timeout)

    def _changes(self, changelist: Iterable[kevent] | None) -> list[kevent]:
        """The change list as a list, every entry checked before any is applied."""
        if changelist is None:
            return []
        try:
            changes = list(changelist)
        except TypeError:
            raise TypeError("changelist is not iterable") from None
        for change in changes:
            if not isinstance(change, kevent):
                raise TypeError(f"changelist must be an iterable of {__name__}.kevent objects")
            if change.filter not in self._filters:
                raise NotImplementedError(f"filter {change.filter} is not emulated: only "
                                          "KQ_FILTER_READ and KQ_FILTER_WRITE")
        return changes

    def _apply(self, change: kevent) -> None:
        """Make one change, as FreeBSD's kqueue_register does.  Raises OSError(errno)."""
        flt = self._filters[change.filter]
        file = self._current_file(change.ident)
        flags = change.flags & ~KQ_EV_SYSFLAGS
        knote = flt.knotes.get(change.ident)
        if knote is None:
            if not flags & KQ_EV_ADD:
                raise _oserror(errno.ENOENT)  # DELETE, ENABLE or DISABLE of nothing
            knote = _Knote(change.ident, flags & ~_ACTIONS, change.udata, file)
            if flags & KQ_EV_ENABLE or not flags & KQ_EV_DISABLE:
                flt.arm(knote)  # if epoll refuses the file, nothing is kept
            flt.knotes[knote.ident] = knote
        elif flags & KQ_EV_DELETE:
            flt.remove(knote)
        else:
            knote.udata = change.udata
            enable = knote.enabled
            if flags & KQ_EV_ENABLE:
                enable = True
            elif flags & KQ_EV_DISABLE:
                enable = False
            if not enable:
                flt.disarm(knote)
            elif not knote.enabled or flags & KQ_EV_ADD:
                flt.arm(knote)  # EV_ADD again: re-check readiness, as kqueue re-runs the filter

    def _current_file(self, fd: int) -> os.stat_result:
        """fstat(fd), after forgetting knotes left by a file that had this number before.

        Raises OSError(EBADF) if ``fd`` is not open, as kevent(2) does.

        Discussion: kqueue deletes a descriptor's knotes when it is closed;
        we cannot see close(), and epoll drops its own item silently.  If we
        kept the old knotes, the next socket to get that number would inherit
        them (and, say, a write interest it never asked for).  A file's
        (st_dev, st_ino) names it while it is open, and every new socket or
        pipe gets a new inode, so a different pair means a different file.
        """
        if fd > 0x7FFFFFFF:  # no descriptor is that large
            raise _oserror(errno.EBADF)
        file = os.fstat(fd)
        for flt in self._filters.values():
            knote = flt.knotes.get(fd)
            if knote is not None and (knote.file.st_dev, knote.file.st_ino) != (file.st_dev, file.st_ino):
                flt.remove(knote)
        return file

    def _wait(self, maxevents: int, timeout: float | None) -> list[kevent]:
        """Wait up to ``timeout`` seconds (None: forever) for events; return at most ``maxevents``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._turn ^= 1
            filters = list(self._filters.values())
            if self._turn:
                filters.reverse()
            armed = [flt for flt in filters if flt.armed]
            if len(armed) == 1:
                waits = [(armed[0], timeout)]  # one filter in use: wait on it directly
            else:
                # None or both in use: sleep on the instance that holds both,
                # then ask each one that is ready, without waiting.
                ready = {fd for fd, _ in self._epoll.poll(timeout)}
                waits = [(flt, 0) for flt in armed if flt.epoll.fileno() in ready]
            events: list[kevent] = []
            for flt, wait in waits:
                if len(events) < maxevents:
                    flt.collect(wait, maxevents - len(events), events)
            if events or timeout == 0:
                return events
            if deadline is not None:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    return []
            # Woken for an item that was no longer ready: wait again.


def _ioctl_int(fd: int, request: int) -> int:
    """The int an ioctl(2) ``request`` such as FIONREAD returns for ``fd``."""
    return struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0]


def _getsockopt(fd: int, level: int, option: int, size: int = 0) -> int | bytes:
    """getsockopt(2) on a descriptor we do not own: borrow it in a socket object, then let go."""
    sock = socket.socket(fileno=fd)
    try:
        return sock.getsockopt(level, option, size) if size else sock.getsockopt(level, option)
    finally:
        sock.detach()  # never close it: the descriptor belongs to the program


def _readable(fd: int, mode: int) -> int:
    """``data`` for a READ event: bytes waiting (FIONREAD, see ioctl_list(2)).

    A listening socket has no bytes, and Linux answers FIONREAD with EINVAL;
    kqueue reports the connections waiting to be accepted, which Linux gives
    for TCP in tcp_info (tcpi_unacked of a socket in LISTEN state).  0 when
    neither can be told.
    """
    try:
        return _ioctl_int(fd, termios.FIONREAD)
    except OSError:
        pass
    if stat.S_ISSOCK(mode):
        try:
            info = _getsockopt(fd, socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
        except OSError:
            return 0
        assert isinstance(info, bytes)
        if len(info) >= _TCPI_UNACKED + 4 and info[0] == _TCP_LISTEN:
            return struct.unpack_from("I", info, _TCPI_UNACKED)[0]
    return 0


def _writable(fd: int, mode: int) -> int:
    """``data`` for a WRITE event: room left in the send buffer, in bytes, as near as Linux tells.

    Sockets: SO_SNDBUF less SIOCOUTQ (bytes sent but not yet acknowledged,
    see tcp(7)); pipes: the pipe's size (F_GETPIPE_SZ) less the bytes in it.
    0 for anything else.
    """
    try:
        if stat.S_ISSOCK(mode):
            size = _getsockopt(fd, socket.SOL_SOCKET, socket.SO_SNDBUF)
            assert isinstance(size, int)
            return max(0, size - _ioctl_int(fd, termios.TIOCOUTQ))  # TIOCOUTQ == SIOCOUTQ on Linux
        if stat.S_ISFIFO(mode):
            return max(0, fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) - _ioctl_int(fd, termios.FIONREAD))
    except OSError:
        pass
    return 0


def kqueue_api() -> tuple[ModuleType, str]:
    """The kqueue API to use here: ``(module, description)``.

    Returns ``(select, "native kqueue")`` where ``select.kqueue`` exists (BSD,
    macOS), else ``(this module, "kqueue emulated on epoll")`` where epoll
    does (Linux).  Both modules offer ``kqueue``, ``kevent`` and the KQ_*
    constants with the same values, so code written against the returned
    module runs on either.  Raises NotImplementedError where there is neither.
    """
    if hasattr(select, "kqueue"):
        return select, "native kqueue"
    if hasattr(select, "epoll"):
        return sys.modules[__name__], "kqueue emulated on epoll"
    raise NotImplementedError(f"no kqueue and no epoll on {sys.platform}: "
                              "the kqueue stage cannot run here")
