"""I/O on a selector: the ``sock_*`` coroutines, accepting connections, and
the transports that turn readiness into protocol calls.  It reads beside
CPython's Lib/asyncio/selector_events.py, which has the same classes.

A transport replaces what Part II's streams did around every read:

    Part II (coroutines)                      Part III (a transport)
    ------------------------------------      ----------------------------------
    add_reader, await, remove_reader,         add_reader once; each readiness
      recv -- per read                          calls recv and data_received
    send in the coroutine, await              write() sends at once; only what
      writability for the rest                  the kernel refuses waits for
                                                add_writer

That is the saving the chapter measures: one epoll_ctl per connection
instead of two per read.

Rules this file keeps:
  * Two doors to the selector.  ``add_reader``/``add_writer`` are for
    users, and refuse a descriptor a transport owns (RuntimeError), as
    asyncio does; ``_add_reader``/``_add_writer`` are Part II's, unchecked,
    for the transports and sock_* coroutines here.
  * Try first, wait second.  Every operation calls the socket at once and
    registers interest only when the kernel says EAGAIN: on a busy
    connection most reads and writes never touch the selector.
  * A transport calls its protocol only from the loop's callbacks, never
    from inside ``write()`` or ``close()``: connection_made and
    connection_lost are scheduled with call_soon, so a protocol never sees
    itself re-entered.
  * Errors stay with their connection.  A reset peer closes that transport
    (quietly: a reset is ordinary); anything else also goes to the loop's
    exception handler.  Neither touches another connection.
  * At the descriptor limit the listener backs off (see _accept_connection).

Where this differs from CPython, and why:
  * A plain TCP connection is set up without a task: the protocol and the
    transport are made in the accept callback.  asyncio makes a task per
    accepted connection so that one code path serves TLS too; we keep the
    task for TLS, whose handshake must be awaited.
  * At EMFILE the back-off is logged once per episode, not once per retry.
  * get_extra_info("socket") is the socket itself, not a wrapper that
    refuses close(): the reader sees the real object.
  * On Linux the default selector is _EpollSelector, selectors' epoll
    selector with a shorter select() (asyncio takes DefaultSelector as it
    is): it runs once per ready descriptor, on every read.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import math
import operator
import os
import select
import selectors
import socket
import ssl as ssl_module
import _socket
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from tinyloop.aio import base_events
from tinyloop.aio.futures import _set_result_unless_cancelled
from tinyloop.aio.transports import FlowControlMixin, source_traceback, unclosed_message
from tinyloop.callbacks import loop as reactor

EVENT_READ, EVENT_WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE

__all__ = ["ACCEPT_RETRY_DELAY", "BaseSelectorEventLoop"]

logger = logging.getLogger("asyncio")

# Seconds a listener rests after accept(2) failed for want of descriptors or
# memory (asyncio's constants.ACCEPT_RETRY_DELAY is the same second).
ACCEPT_RETRY_DELAY = 1.0

# accept(2) errors that mean "not now" rather than "never": the process or
# the system is out of descriptors, or the kernel out of buffers.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

# After this many writes to a lost connection, write() says so in the log.
_LOG_THRESHOLD_FOR_CONNLOST_WRITES = 5

# sendmsg(2) takes at most IOV_MAX buffers in one call (1024 on Linux).
try:
    _IOV_MAX = os.sysconf("SC_IOV_MAX")
except (AttributeError, ValueError, OSError):  # no sysconf, or no such name here
    _IOV_MAX = 16
_HAS_SENDMSG = hasattr(socket.socket, "sendmsg")


class _WriteBuffer(list):
    """A transport's queue of unsent chunks: a list with deque's ``popleft``.

    Discussion: an empty ``collections.deque`` allocates its first block of
    64 slots at once, about 700 bytes per transport, and most transports
    never buffer: the kernel takes the whole write.  An empty list allocates
    nothing (tracemalloc, 2,000 idle keep-alive connections: 2,698 -> about
    1,990 bytes of Python heap each; asyncio 3.11's 2,008).  ``pop(0)``
    moves the rest of the list, which is short: flow control pauses the
    protocol at the high-water mark.
    """

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


# What write() takes.  A module constant: written inline, the tuple is built
# anew (three global lookups and an allocation) on every write.
_BYTES_LIKE = (bytes, bytearray, memoryview)


# A socket's family, type and protocol as plain ints.  socket.py's ``family``
# and ``type`` properties turn the kernel's int into an enum on every read (two
# Python calls each, five per accepted connection before these); the C getters
# of the base class return the int, which compares equal to the enum.
_family_of = _socket.socket.family.__get__
_type_of = _socket.socket.type.__get__
_proto_of = _socket.socket.proto.__get__
_INET = (socket.AF_INET, socket.AF_INET6)


def _socket_kind(sock: socket.socket) -> tuple[int, int, int]:
    """``(family, type, proto)`` of ``sock`` as ints; an object that is no
    socket (a test's stand-in) gives its own attributes."""
    try:
        return _family_of(sock), _type_of(sock), _proto_of(sock)
    except TypeError:
        return sock.family, sock.type, sock.proto


def _set_nodelay(sock: socket.socket) -> None:
    # Discussion: Nagle's algorithm holds a small write back until the
    # previous one is acknowledged; with delayed ACKs on the peer that is a
    # 40 ms stall per request/response.  asyncio turns it off for every TCP
    # transport, and so do we (tcp(7), TCP_NODELAY).
    family, kind, proto = _socket_kind(sock)
    if family in _INET and kind == socket.SOCK_STREAM and proto in (0, socket.IPPROTO_TCP):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _socket_extra(sock: socket.socket, extra: dict[str, Any] | None) -> dict[str, Any]:
    """A socket transport's ``get_extra_info`` table: ``extra`` plus socket, sockname, peername.

    An address the kernel will not give (a socket not bound, or no longer
    connected) is None.  Shared with Part IV's TCP transport.
    """
    info = dict(extra) if extra else {}
    info["socket"] = sock
    try:
        info["sockname"] = sock.getsockname()
    except OSError:
        info["sockname"] = None
    if "peername" not in info:
        try:
            info["peername"] = sock.getpeername()
        except OSError:
            info["peername"] = None
    return info


if hasattr(selectors, "EpollSelector"):
    _EPOLLIN, _EPOLLOUT = select.EPOLLIN, select.EPOLLOUT
    _NOT_ONLY_IN = ~_EPOLLIN    # a bit beside EPOLLIN: writable, or an error or hang-up
    _NOT_ONLY_OUT = ~_EPOLLOUT  # a bit beside EPOLLOUT: readable, or an error or hang-up

    class _EpollSelector(selectors.EpollSelector):
        """selectors' epoll selector with a shorter select(): the loop's default on Linux.

        Discussion: select() runs once per ready descriptor per iteration,
        on every read the loop makes.  The standard library's turns each
        epoll event into selectors' two bits through class attributes and
        finds the descriptor's key through a method call; this one reads the
        table directly and keeps the constants in globals, for the same
        result: an error or a hang-up (EPOLLERR, EPOLLHUP) counts as both
        readable and writable, masked by what the key asked for
        (epoll_ctl(2), "EPOLLERR").  Everything else (register, modify,
        the key objects, the descriptor table) is the standard library's.
        """

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            """Wait up to ``timeout`` seconds (None: forever, <= 0: not at all); return
            ``(key, events)`` for each ready descriptor, as selectors' select() does."""
            if timeout is None:
                timeout = -1
            elif timeout <= 0:
                timeout = 0
            else:
                timeout = math.ceil(timeout * 1e3) * 1e-3  # epoll's milliseconds, rounded up
            keys = self._fd_to_key
            try:
                # (``or 1``, not max(): on 3.11 a max() call costs more than the rest of this line)
                fd_events = self._selector.poll(timeout, len(keys) or 1)
            except InterruptedError:  # a signal: the loop looks at its queue and comes back
                return []
            ready = []
            for fd, event in fd_events:
                try:
                    key = keys[fd]
                except KeyError:  # closed without unregistering, and still in epoll's list
                    continue
                # epoll reports only what a descriptor was registered for, plus
                # errors and hang-ups: a lone EPOLLIN or EPOLLOUT needs no mask.
                if event == _EPOLLIN:
                    ready.append((key, EVENT_READ))
                elif event == _EPOLLOUT:
                    ready.append((key, EVENT_WRITE))
                else:
                    events = ((EVENT_WRITE if event & _NOT_ONLY_IN else 0)
                              | (EVENT_READ if event & _NOT_ONLY_OUT else 0))
                    ready.append((key, events & key.events))
            return ready


def default_selector() -> selectors.BaseSelector:
    """The selector a loop gets when it is given none: our epoll selector on Linux,
    else the best the platform has (:class:`selectors.DefaultSelector`)."""
    if selectors.DefaultSelector is getattr(selectors, "EpollSelector", None):
        return _EpollSelector()
    return selectors.DefaultSelector()


def _check_ssl_socket(sock: socket.socket) -> None:
    if isinstance(sock, ssl_module.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


class BaseSelectorEventLoop(base_events.BaseEventLoop):
    """The asyncio loop on a :mod:`selectors` selector (epoll, kqueue, poll or select)."""

    def __init__(self, selector: Any = None, clock: Callable[[], float] = time.monotonic, *,
                 debug: bool | None = None) -> None:
        # Which transport owns which descriptor (weakly: a transport that is
        # collected gives its descriptor back).  Set before the reactor's
        # __init__, whose self-pipe goes through add_reader's check.
        self._transports: weakref.WeakValueDictionary[int, _SelectorTransport] = \
            weakref.WeakValueDictionary()
        # Listeners resting after EMFILE: fd -> the timer that wakes them.
        self._accept_backoff: dict[int, reactor.TimerHandle] = {}
        # The one buffer every transport's recv goes into: see _SelectorTransport.
        self._recv_view = memoryview(bytearray(_SelectorTransport.max_size))
        super().__init__(default_selector() if selector is None else selector, clock, debug=debug)

    # -- Readiness: the users' door, checked -----------------------------------------

    _add_reader = reactor.Loop.add_reader
    _add_writer = reactor.Loop.add_writer
    _remove_reader = reactor.Loop.remove_reader
    _remove_writer = reactor.Loop.remove_writer

    def _ensure_fd_no_transport(self, fd: Any) -> None:
        fileno = fd
        if not isinstance(fileno, int):
            try:
                fileno = int(fileno.fileno())
            except (AttributeError, TypeError, ValueError):
                # selectors' rule for a file object, in asyncio's words.
                raise ValueError(f"Invalid file object: {fd!r}") from None
        transport = self._transports.get(fileno)
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    def add_reader(self, fd: Any, callback: Callable[..., object], *args: Any) -> reactor.Handle:
        """Call ``callback(*args)`` whenever ``fd`` is readable (level-triggered).

        Raises RuntimeError if a transport owns ``fd``.  See Part II's add_reader.
        """
        self._ensure_fd_no_transport(fd)
        return self._add_reader(fd, callback, *args)

    def add_writer(self, fd: Any, callback: Callable[..., object], *args: Any) -> reactor.Handle:
        """Call ``callback(*args)`` whenever ``fd`` is writable; RuntimeError if a transport owns it."""
        self._ensure_fd_no_transport(fd)
        return self._add_writer(fd, callback, *args)

    def remove_reader(self, fd: Any) -> bool:
        """Stop watching ``fd`` for reading; True if a reader was set."""
        self._ensure_fd_no_transport(fd)
        return self._remove_reader(fd)

    def remove_writer(self, fd: Any) -> bool:
        """Stop watching ``fd`` for writing; True if a writer was set."""
        self._ensure_fd_no_transport(fd)
        return self._remove_writer(fd)

    # -- Socket operations as coroutines -----------------------------------------------
    #
    # Discussion: every sock_* coroutine but sendall and connect has one
    # shape: try the call; on EAGAIN register a callback that tries it again
    # each time the socket is ready, and await a future it completes.  A
    # cancelled await removes the registration (the done-callback), so a
    # cancelled sock_recv leaves no reader behind.  _sock_call is that shape.
    #
    # Each try looks the socket's method up again (operator.methodcaller),
    # as asyncio's retries do: an object that stands in for a socket may
    # swap the method between tries (a test's mock, a wrapper), and a retry
    # that kept calling the first one it found could wait forever.

    async def _sock_call(self, sock: socket.socket, writing: bool,
                         call: Callable[..., Any], *args: Any) -> Any:
        self._check_sock(sock)
        try:
            return call(*args)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_retry_when_ready(sock, writing, call, args)

    def _check_sock(self, sock: socket.socket) -> None:
        """What every sock_* coroutine refuses: a TLS socket; in debug mode, a blocking one."""
        _check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")

    def _sock_retry_when_ready(self, sock: socket.socket, writing: bool,
                               call: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Future:
        # exercise sock-retry: begin
        fd = sock.fileno()
        self._ensure_fd_no_transport(fd)
        future = self.create_future()
        add, remove = (self._add_writer, self._remove_writer) if writing else \
            (self._add_reader, self._remove_reader)
        handle = add(fd, self._sock_retry, future, call, args)
        future.add_done_callback(functools.partial(self._sock_done, fd, handle, remove))
        return future
        # exercise sock-retry: end

    @staticmethod
    def _sock_retry(future: asyncio.Future, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
        # exercise sock-retry: begin
        if future.done():
            return
        try:
            result = call(*args)
        except (BlockingIOError, InterruptedError):
            return  # a spurious wake-up: wait for the next readiness
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            future.set_exception(exc)
            # The error's traceback holds this frame, and the frame the
            # future that holds the error: drop it, or the three make a
            # cycle only the cyclic GC frees (asyncio does the same).
            future = None  # type: ignore[assignment]
        else:
            future.set_result(result)
        # exercise sock-retry: end

    @staticmethod
    def _sock_done(fd: int, handle: reactor.Handle, remove: Callable[[int], bool],
                   future: asyncio.Future) -> None:
        if not handle.cancelled():  # another registration replaced ours: leave it
            remove(fd)

    async def sock_recv(self, sock: socket.socket, nbytes: int) -> bytes:
        """Receive up to ``nbytes`` bytes from ``sock`` (non-blocking); b"" at EOF.  See recv(2)."""
        return await self._sock_call(sock, False, operator.methodcaller("recv", nbytes), sock)

    async def sock_recv_into(self, sock: socket.socket, buf: Any) -> int:
        """Receive into the writable buffer ``buf``; return the byte count (0 at EOF)."""
        return await self._sock_call(sock, False, operator.methodcaller("recv_into", buf), sock)

    async def sock_recvfrom(self, sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
        """Receive a datagram of up to ``bufsize`` bytes; return (data, address).  See recvfrom(2)."""
        return await self._sock_call(sock, False, operator.methodcaller("recvfrom", bufsize), sock)

    async def sock_recvfrom_into(self, sock: socket.socket, buf: Any, nbytes: int = 0) -> tuple[int, Any]:
        """Receive a datagram into ``buf`` (at most ``nbytes``, 0: len(buf)); return (count, address)."""
        return await self._sock_call(
            sock, False, operator.methodcaller("recvfrom_into", buf, nbytes or len(buf)), sock)

    async def sock_sendto(self, sock: socket.socket, data: Any, address: Any) -> int:
        """Send one datagram to ``address``; return the bytes sent.  See sendto(2)."""
        return await self._sock_call(sock, True, operator.methodcaller("sendto", data, address),
                                     sock)

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, Any]:
        """Accept a connection on the listening ``sock``; return (non-blocking socket, address)."""
        conn, address = await self._sock_call(sock, False, operator.methodcaller("accept"), sock)
        conn.setblocking(False)
        return conn, address

    async def sock_sendall(self, sock: socket.socket, data: Any) -> None:
        """Send all of ``data`` on ``sock``, waiting for writability as often as needed.

        Raises the send error (e.g. BrokenPipeError); on cancellation some
        prefix of ``data`` may have been sent.
        """
        self._check_sock(sock)
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        view = memoryview(data).cast("B")
        while sent < len(view):
            sent += await self._sock_retry_when_ready(sock, True, sock.send, (view[sent:],))

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        """Connect the non-blocking ``sock`` to ``address``; a name is resolved first.

        Raises OSError (ConnectionRefusedError, ...) when the connection fails.
        Discussion: a non-blocking connect(2) answers EINPROGRESS; the socket
        turns writable when the handshake ends, and SO_ERROR then says how it
        ended (connect(2), "EINPROGRESS").
        """
        self._check_sock(sock)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            infos = await self._resolve(*address[:2], family=sock.family, type=sock.type,
                                        proto=sock.proto, flags=0)
            address = infos[0][4]
        try:
            sock.connect(address)
            return
        except (BlockingIOError, InterruptedError):
            pass
        future = self._sock_retry_when_ready(sock, True, self._connect_result, (sock, address))
        try:
            await future
        finally:
            # A failure's traceback holds this frame; from 3.12 the frame
            # holds the future, and the future the failure: a cycle (asyncio
            # clears its future here too).
            future = None  # type: ignore[assignment]

    @staticmethod
    def _connect_result(sock: socket.socket, address: Any) -> None:
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err in (errno.EINPROGRESS, errno.EALREADY):
            raise BlockingIOError(err, "still connecting")  # not done yet: wait again
        if err:
            raise OSError(err, f"Connect call failed {address}")

    async def _sock_sendfile_native(self, sock: socket.socket, file: Any, offset: int,
                                    count: int | None) -> int:
        """sendfile(2): the kernel copies from the file's page cache to the socket, no user copy.

        Raises asyncio.SendfileNotAvailableError where there is no
        os.sendfile, ``file`` is not a regular file, or the kernel refuses
        the pair before a byte was sent.
        """
        if not hasattr(os, "sendfile"):
            raise asyncio.SendfileNotAvailableError("os.sendfile() is not available")
        try:
            fileno = file.fileno()
            size = os.fstat(fileno).st_size
        except (AttributeError, OSError, ValueError) as exc:
            raise asyncio.SendfileNotAvailableError("not a regular file") from exc
        end = size if count is None else min(size, offset + count)
        position = offset
        try:
            while position < end:
                try:
                    sent = await self._sock_call(sock, True, os.sendfile, sock.fileno(), fileno,
                                                 position, min(end - position, 2 ** 30))
                except OSError as exc:
                    if position == offset and exc.errno in (errno.ENOTSOCK, errno.ENOTSUP,
                                                            errno.EINVAL):
                        raise asyncio.SendfileNotAvailableError(str(exc)) from exc
                    raise
                if sent == 0:
                    break  # the file shrank under us
                position += sent
            return position - offset
        finally:
            if position > offset:
                file.seek(position)

    # -- Serving -----------------------------------------------------------------------

    def _start_serving(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                       sock: socket.socket, sslcontext: ssl_module.SSLContext | None,
                       server: base_events.Server, backlog: int = 100,
                       ssl_handshake_timeout: float | None = None,
                       ssl_shutdown_timeout: float | None = None) -> None:
        if sock.fileno() == -1:
            return  # closed while it rested
        self._add_reader(sock, self._accept_connection, protocol_factory, sock, sslcontext,
                         server, backlog, ssl_handshake_timeout, ssl_shutdown_timeout)

    def _stop_serving(self, sock: socket.socket) -> None:
        retry = self._accept_backoff.pop(sock.fileno(), None)
        if retry is not None:
            retry.cancel()
        self._remove_reader(sock)
        sock.close()

    def _accept_connection(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                           sock: socket.socket, sslcontext: ssl_module.SSLContext | None,
                           server: base_events.Server, backlog: int,
                           ssl_handshake_timeout: float | None,
                           ssl_shutdown_timeout: float | None) -> None:
        """The listener is readable: accept up to ``backlog`` connections.

        Discussion: the listener is level-triggered.  If accept(2) fails with
        EMFILE, the connection stays in the kernel's queue, the listener stays
        readable, and the next wait returns at once: the loop would spin a
        core for as long as the process is out of descriptors.  So we take the
        listener out of the selector and put it back ACCEPT_RETRY_DELAY
        seconds later (asyncio's remedy; libuv and nginx keep a spare
        descriptor instead, which the readiness chapter shows).  Connections
        already open are served meanwhile.
        """
        for _ in range(backlog):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # the queue is empty, or a client gave up before we took it
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise  # reported with this handle by the loop's exception handler
                self._accept_back_off(exc, protocol_factory, sock, sslcontext, server, backlog,
                                      ssl_handshake_timeout, ssl_shutdown_timeout)
                return
            if self._accept_backoff and self._accept_backoff.pop(sock.fileno(), None) is not None:
                logger.info("accepting connections on %r again", sock)
            conn.setblocking(False)
            extra = {"peername": address}
            if sslcontext is None:
                self._accept_plain(protocol_factory, conn, extra, server)
            else:
                self.create_task(self._accept_tls(protocol_factory, conn, extra, sslcontext, server,
                                                  ssl_handshake_timeout, ssl_shutdown_timeout))

    def _accept_back_off(self, exc: OSError, *serving: Any) -> None:
        # exercise aio-accept-backoff: begin
        sock = serving[1]
        if sock.fileno() not in self._accept_backoff:  # log the start of an episode only
            self.call_exception_handler({
                "message": f"socket.accept() out of system resource; not accepting for "
                           f"{ACCEPT_RETRY_DELAY} s at a time until it succeeds",
                "exception": exc, "socket": sock,
            })
        self._remove_reader(sock)
        self._accept_backoff[sock.fileno()] = self.call_later(ACCEPT_RETRY_DELAY,
                                                              self._start_serving, *serving)
        # exercise aio-accept-backoff: end

    def _accept_plain(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                      conn: socket.socket, extra: dict[str, Any], server: base_events.Server) -> None:
        try:
            protocol = protocol_factory()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            conn.close()
            self.call_exception_handler({"message": "Error in protocol_factory() while accepting",
                                         "exception": exc, "socket": conn})
            return
        self._make_socket_transport(conn, protocol, extra=extra, server=server)

    async def _accept_tls(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                          conn: socket.socket, extra: dict[str, Any],
                          sslcontext: ssl_module.SSLContext, server: base_events.Server,
                          ssl_handshake_timeout: float | None,
                          ssl_shutdown_timeout: float | None) -> None:
        transport = None
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            transport = self._make_ssl_transport(
                conn, protocol, sslcontext, waiter, server_side=True, extra=extra, server=server,
                ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout)
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if transport is None:
                conn.close()
            else:
                transport.close()
            if self._debug:
                self.call_exception_handler({"message": "Error on transport creation for incoming "
                                             "connection", "exception": exc})

    # -- Transport factories -------------------------------------------------------------

    def _make_socket_transport(self, sock: socket.socket, protocol: asyncio.BaseProtocol,
                               waiter: asyncio.Future | None = None, *,
                               extra: dict[str, Any] | None = None,
                               server: base_events.Server | None = None) -> _SelectorSocketTransport:
        return _SelectorSocketTransport(self, sock, protocol, waiter, extra, server)

    def _make_datagram_transport(self, sock: socket.socket, protocol: asyncio.BaseProtocol,
                                 address: Any = None, waiter: asyncio.Future | None = None,
                                 extra: dict[str, Any] | None = None) -> _SelectorDatagramTransport:
        return _SelectorDatagramTransport(self, sock, protocol, address, waiter, extra)


class _SelectorTransport(FlowControlMixin, asyncio.Transport):
    """What a socket transport and a datagram transport share: the socket's
    registration, closing, aborting, errors, and pausing reads.

    State (all of it):

        _buffer       FIFO (_WriteBuffer) of what write()/sendto() could not send yet
        _buffer_size  bytes in _buffer (what flow control compares to the marks)
        _closing      close() or abort() was called: read no more
        _conn_lost    connection_lost is scheduled (counts writes after it)
        _paused       pause_reading() holds the reader off the selector
        _recv_view    where recv(2) puts what arrives: the loop's one buffer,
                      from which each read's bytes are copied out

    Discussion: asyncio reads with ``sock.recv(max_size)``, which allocates a
    256 KiB bytes object before every read and shrinks it to what arrived.
    That is above glibc's mmap threshold (mallopt(3)), so the allocation is
    the readiness chapter's lesson again: mmap(2), mremap(2) and munmap(2)
    on every read, and page faults on the fresh pages, none of it visible to
    a Python profiler.  Whether a process pays it depends on its history
    (glibc raises the threshold when a large block is freed whole, and may
    then trim its heap on every read instead), so one server can pay it
    with 5,000 idle connections and not without, and two runs of asyncio can
    differ by it.  We read into one buffer per loop, as uvloop does, and
    copy out the bytes that came: a copy of n bytes, no allocation above
    n, the same cost in every process.  python/cpython#85451 reports the
    regime on asyncio.
    """

    max_size = 256 * 1024  # bytes asked of one recv(2), and the loop's buffer's size

    def __init__(self, loop: BaseSelectorEventLoop, sock: socket.socket,
                 protocol: asyncio.BaseProtocol, extra: dict[str, Any] | None = None,
                 server: base_events.Server | None = None) -> None:
        super().__init__(_socket_extra(sock, extra), loop)
        self._source_traceback = source_traceback(loop)
        self._sock: socket.socket | None = sock
        self._sock_fd = sock.fileno()
        # Every read asks for max_size bytes.  Read through the instance, a
        # class attribute is the slow kind of lookup (3.11 does not
        # specialize it); copied here, it is a plain field.  Setting it on
        # the class still works for the transports made after.
        self.max_size = self.max_size
        self._recv_view = loop._recv_view
        self._protocol: Any = None
        self.set_protocol(protocol)
        self._server = server
        self._buffer: _WriteBuffer = _WriteBuffer()
        self._buffer_size = 0
        self._conn_lost = 0
        self._closing = False
        self._paused = False
        if server is not None:
            server._attach(self)
        loop._transports[self._sock_fd] = self

    def _recv_view_outgrown(self, exc: BaseException) -> bool:
        """True if ``exc`` is recv_into's ValueError for a max_size set above the
        buffer's length: the transport then gets a buffer of its own that size
        and reads on the next readiness (level-triggered, so it comes)."""
        if not isinstance(exc, ValueError) or self.max_size <= len(self._recv_view):
            return False  # a negative max_size too: that stays asyncio's fatal error
        self._recv_view = memoryview(bytearray(self.max_size))
        return True

    def __repr__(self) -> str:
        if self._sock is None:
            return f"<{type(self).__name__} closed>"
        state = "closing" if self._closing else "paused" if self._paused else "reading"
        return (f"<{type(self).__name__} fd={self._sock_fd} {state} "
                f"buffered={self._buffer_size}>")

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if getattr(self, "_sock", None) is not None:
            _warn(unclosed_message(self), ResourceWarning, source=self)
            self._sock.close()

    # -- The protocol --------------------------------------------------------------

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def get_write_buffer_size(self) -> int:
        return self._buffer_size

    # -- Reading -------------------------------------------------------------------

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        """Stop calling the protocol with data until :meth:`resume_reading`; idempotent.

        The socket leaves the selector's read set, the kernel's receive
        buffer fills, and TCP's window tells the peer to stop: backpressure.
        """
        if not self.is_reading():
            return
        self._paused = True
        self._loop._remove_reader(self._sock_fd)

    def resume_reading(self) -> None:
        """Start reading again after :meth:`pause_reading`; idempotent."""
        if self._closing or not self._paused:
            return
        self._paused = False
        self._start_reading()

    def _start_reading(self) -> None:
        if self.is_reading():  # connection_made may have paused or closed us
            self._loop._add_reader(self._sock_fd, self._read_ready)

    def _read_ready(self) -> None:
        raise NotImplementedError

    # -- Closing -------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Read no more; send what is buffered, then close and call connection_lost(None)."""
        if self._closing:
            return
        self._closing = True
        self._loop._remove_reader(self._sock_fd)
        if not self._buffer:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)

    def abort(self) -> None:
        """Close now, dropping whatever is buffered; connection_lost(None) follows."""
        self._force_close(None)

    def _fatal_error(self, exc: BaseException, message: str) -> None:
        # A reset or broken pipe is the peer's ordinary way of leaving.
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler({"message": message, "exception": exc,
                                               "transport": self, "protocol": self._protocol})
        self._force_close(exc)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        if self._buffer:
            self._buffer.clear()
            self._buffer_size = 0
            self._loop._remove_writer(self._sock_fd)
        if not self._closing:
            self._closing = True
            self._loop._remove_reader(self._sock_fd)
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()  # type: ignore[union-attr]
            self._sock = None
            self._protocol = None
            server, self._server = self._server, None
            if server is not None:
                server._detach(self)


class _SelectorSocketTransport(_SelectorTransport):
    """A stream (TCP or Unix) connection: data_received in, write() out.

    Reads go to ``protocol.data_received(bytes)``, or, for an
    ``asyncio.BufferedProtocol``, into ``protocol.get_buffer()`` with
    ``buffer_updated(nbytes)``: no bytes object per read.
    """

    _start_tls_compatible = True

    def __init__(self, loop: BaseSelectorEventLoop, sock: socket.socket,
                 protocol: asyncio.BaseProtocol, waiter: asyncio.Future | None = None,
                 extra: dict[str, Any] | None = None,
                 server: base_events.Server | None = None) -> None:
        super().__init__(loop, sock, protocol, extra, server)
        self._eof = False  # write_eof() was called: shut down writing once flushed
        self._empty_waiter: asyncio.Future | None = None  # sendfile waits for an empty buffer
        _set_nodelay(sock)
        loop.call_soon(self._protocol.connection_made, self)
        loop.call_soon(self._start_reading)  # after connection_made, which may pause us
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        # The read path depends on the protocol's kind; choose it once here,
        # not on every read.
        self._read_ready = (self._read_ready__get_buffer
                            if isinstance(protocol, asyncio.BufferedProtocol)
                            else self._read_ready__data_received)
        reading = self._protocol is not None and self.is_reading()
        super().set_protocol(protocol)
        if reading:
            self._start_reading()  # re-register: the callback changed

    # -- Reading -----------------------------------------------------------------------

    def _read_ready__data_received(self) -> None:
        if self._conn_lost:
            return
        view = self._recv_view
        try:
            nbytes = self._sock.recv_into(view, self.max_size)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if not self._recv_view_outgrown(exc):
                self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if self._loop._instrument is not None:  # tinyloop.trace: one recv(2), nbytes bytes
            self._loop._instrument.transport_read(self, nbytes, 1)
        if not nbytes:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.data_received(view[:nbytes].tobytes())
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _read_ready__get_buffer(self) -> None:
        if self._conn_lost:
            return
        try:
            buf = self._protocol.get_buffer(-1)
            if not len(buf):
                raise RuntimeError("get_buffer() returned an empty buffer")
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
            return
        try:
            nbytes = self._sock.recv_into(buf)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if self._loop._instrument is not None:
            self._loop._instrument.transport_read(self, nbytes, 1)
        if not nbytes:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.buffer_updated(nbytes)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")

    def _read_ready__on_eof(self) -> None:
        """The peer shut down its side.  eof_received() returning true keeps ours open
        for writing (a half-close); otherwise we close."""
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if keep_open:
            self._loop._remove_reader(self._sock_fd)  # nothing more will come
        else:
            self.close()

    # -- Writing -------------------------------------------------------------------------

    def write(self, data: Any) -> None:
        """Send ``data`` (bytes-like) now if the kernel takes it; buffer the rest.

        Never blocks.  Calls the protocol's pause_writing() before returning
        when the buffer crosses the high-water mark (flow control, as
        CPython's transports do: Lib/asyncio/transports.py,
        _FlowControlMixin._maybe_pause_protocol); a send error reaches the
        protocol later, as connection_lost() scheduled by call_soon.  Raises
        TypeError for a non-bytes-like, RuntimeError after write_eof() or
        during sendfile.
        """
        if not isinstance(data, _BYTES_LIKE):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to write; sendfile is in progress")
        if not data:
            return
        if self._conn_lost:
            if self._conn_lost >= _LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if self._loop._instrument is not None and not self._observing:  # tinyloop.trace: see _write_observed
            self._write_observed(data)
            return
        # exercise transport-write: begin
        if not self._buffer:
            # The common case: nothing is waiting, so try the kernel now.
            try:
                sent = self._sock.send(data)  # type: ignore[union-attr]
            except (BlockingIOError, InterruptedError):
                sent = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on socket transport")
                return
            if sent == len(data):
                return
            self._loop._add_writer(self._sock_fd, self._write_ready)
            data = data[sent:] if sent else data
        # Keep a copy of a mutable buffer: the caller may reuse it after we return.
        self._buffer.append(data if isinstance(data, bytes) else bytes(data))
        self._buffer_size += len(data)
        self._maybe_pause_protocol()
        # exercise transport-write: end

    # True while _write_observed's own call of write() runs (a class default:
    # no field to set in __init__, and write()'s test reads it only when an
    # instrument is installed).
    _observing = False

    def _write_observed(self, data: Any) -> None:
        """:meth:`write` with instruments installed: write, then report what the kernel took.

        Discussion: write()'s fast path returns from the middle, right after
        its send, so the report is made around it.  What went to the buffer
        is what the kernel did not take; a send was tried only if the buffer
        was empty.  The transport marks itself (``_observing``) for the one
        call, so write() takes its plain path; the loop's instruments stay
        installed, and whatever the call sets off (the protocol's
        pause_writing writing to another transport, say) is reported as it
        would be without this transport's report: an observer must not
        change what it observes.
        """
        buffered, size = self._buffer_size, len(data)
        self._observing = True
        try:
            self.write(data)
        finally:
            self._observing = False
        taken = max(0, size - (self._buffer_size - buffered))  # (a fatal error empties the buffer)
        instrument = self._loop._instrument  # (a hook that raised may have removed the last one)
        if instrument is not None:
            instrument.transport_wrote(self, taken, 0 if buffered else 1, self._buffer_size)

    def writelines(self, list_of_data: Any) -> None:
        """Write every bytes-like in the iterable, as one send where the kernel takes it."""
        self.write(b"".join(list_of_data))

    def _write_ready(self) -> None:
        if self._conn_lost:
            return
        try:
            if len(self._buffer) == 1 or not _HAS_SENDMSG:
                sent = self._sock.send(self._buffer[0])  # type: ignore[union-attr]
            else:
                # writev(2) by another name: the whole buffer in one system call.
                sent = self._sock.sendmsg(  # type: ignore[union-attr]
                    [self._buffer[i] for i in range(min(len(self._buffer), _IOV_MAX))])
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal write error on socket transport")
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(exc)
            return
        self._consume(sent)
        if self._loop._instrument is not None:  # tinyloop.trace: one send(2)/sendmsg(2)
            self._loop._instrument.transport_wrote(self, sent, 1, self._buffer_size)
        self._maybe_resume_protocol()
        if self._buffer:
            return
        self._loop._remove_writer(self._sock_fd)
        if self._empty_waiter is not None:
            self._empty_waiter.set_result(None)
        if self._closing:
            self._call_connection_lost(None)
        elif self._eof:
            self._sock.shutdown(socket.SHUT_WR)  # type: ignore[union-attr]

    def _consume(self, sent: int) -> None:
        """Drop ``sent`` bytes from the front of the buffer."""
        # exercise transport-write: begin
        self._buffer_size -= sent
        buffer = self._buffer
        while sent:
            head = buffer[0]
            if len(head) <= sent:
                sent -= len(head)
                buffer.popleft()
            else:
                buffer[0] = memoryview(head)[sent:]
                break
        # exercise transport-write: end

    def write_eof(self) -> None:
        """Shut down the sending side (a FIN) once the buffer is sent; reading goes on."""
        if self._closing or self._eof:
            return
        self._eof = True
        if not self._buffer:
            self._sock.shutdown(socket.SHUT_WR)  # type: ignore[union-attr]

    def can_write_eof(self) -> bool:
        return True

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        super()._call_connection_lost(exc)
        if self._empty_waiter is not None:
            self._empty_waiter.set_exception(ConnectionError("Connection is closed by peer"))

    # -- sendfile ----------------------------------------------------------------------------

    async def _sendfile_native(self, file: Any, offset: int, count: int | None) -> int:
        """loop.sendfile's zero-copy path: flush the buffer, then sendfile(2) on the socket."""
        self._loop._check_sendfile_params(self._sock, file, offset, count)
        resume = self.is_reading()
        self.pause_reading()
        self._empty_waiter = self._loop.create_future()
        if not self._buffer:
            self._empty_waiter.set_result(None)
        try:
            await self._empty_waiter
            # Discussion: while sendfile(2) waits for room, the socket is the
            # sock_* coroutine's, and the sock_* door refuses a descriptor a
            # transport owns (_ensure_fd_no_transport).  So the transport
            # hands it over for the duration and takes it back after, as
            # asyncio's _sendfile_native does.
            del self._loop._transports[self._sock_fd]
            try:
                return await self._loop._sock_sendfile_native(self._sock, file, offset, count)
            finally:
                self._loop._transports[self._sock_fd] = self
        finally:
            self._empty_waiter = None
            if resume:
                self.resume_reading()


class _SelectorDatagramTransport(_SelectorTransport, asyncio.DatagramTransport):
    """A datagram endpoint: datagram_received(data, addr) in, sendto() out.

    A send error that concerns one datagram (ECONNREFUSED from an ICMP
    message, EMSGSIZE) goes to ``protocol.error_received`` and the endpoint
    stays open, as the asyncio docs specify.
    """

    def __init__(self, loop: BaseSelectorEventLoop, sock: socket.socket,
                 protocol: asyncio.BaseProtocol, address: Any = None,
                 waiter: asyncio.Future | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(loop, sock, protocol, extra)
        self._address = address
        loop.call_soon(self._protocol.connection_made, self)
        loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def _read_ready(self) -> None:
        if self._conn_lost:
            return
        view = self._recv_view
        try:
            nbytes, address = self._sock.recvfrom_into(view, self.max_size)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._protocol.error_received(exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if not self._recv_view_outgrown(exc):
                self._fatal_error(exc, "Fatal read error on datagram transport")
        else:
            self._protocol.datagram_received(view[:nbytes].tobytes(), address)

    def sendto(self, data: Any, addr: Any = None) -> None:
        """Send one datagram to ``addr`` (or the connected address); buffer it on EAGAIN.

        Raises TypeError for a non-bytes-like, ValueError for an address
        other than the connected one.
        """
        if not isinstance(data, _BYTES_LIKE):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._address:
            if addr not in (None, self._address):
                raise ValueError(f"Invalid address: must be None or {self._address}")
            addr = self._address
        if self._conn_lost:
            if self._conn_lost >= _LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer:
            try:
                self._send_one(data, addr)
                return
            except (BlockingIOError, InterruptedError):
                self._loop._add_writer(self._sock_fd, self._sendto_ready)
            except OSError as exc:
                self._protocol.error_received(exc)
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return
        self._buffer.append((bytes(data), addr))
        self._buffer_size += len(data)
        self._maybe_pause_protocol()

    def _send_one(self, data: Any, addr: Any) -> None:
        if self._extra["peername"]:
            self._sock.send(data)  # type: ignore[union-attr]
        else:
            self._sock.sendto(data, addr)  # type: ignore[union-attr]

    def _sendto_ready(self) -> None:
        while self._buffer:
            data, addr = self._buffer[0]
            try:
                self._send_one(data, addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._protocol.error_received(exc)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on datagram transport")
                return
            self._buffer.popleft()
            self._buffer_size -= len(data)
        self._maybe_resume_protocol()
        self._loop._remove_writer(self._sock_fd)
        if self._closing:
            self._call_connection_lost(None)
