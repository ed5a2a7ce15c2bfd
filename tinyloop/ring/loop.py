"""tinyloop.ring's loop: Part III's asyncio loop with a proactor on io_uring where its selector was.

Part III's loop asks the selector which sockets are ready, then calls
recv(2) and send(2) itself.  This one hands the kernel the receive and the
send themselves, each with its buffer, and hears when they are done
(tinyloop/ring/proactor.py, on a ring in C through liburing where that
is built, in Python otherwise: tinyloop/ring/core.py).  Everything else is
Part III's, inherited: the ready queue, the timer heap, futures and tasks,
call_soon_threadsafe, signals, the Server object, create_connection's
Happy Eyeballs, TLS (sslproto over our transport), Unix sockets, pipes and
subprocesses (on the proactor's POLL_ADD readiness).

    Part III (readiness)                     tinyloop.ring (completion)
    ---------------------------------------  ---------------------------------------------
    transport reading: add_reader once,      a receive is always outstanding, with no
      recv when readable                       buffer: the kernel takes one of the loop's
                                               provided buffers when data comes; its
                                               completion copies the data out and gives
                                               the buffer back, its handle delivers the
                                               data and submits the next receive
    pause_reading: remove_reader             nothing to take back: the receive already
                                               handed over completes, and its data waits
                                               in the transport until resume_reading
    write: send now, add_writer for the      write: queue, and submit one send of all
      rest                                     that is queued; its completion submits the
                                               rest (a partial send goes on from where
                                               the kernel stopped)
    close: remove_reader, close(2)           cancel the receive (IORING_OP_ASYNC_CANCEL),
                                               close(2); the cancelled receive's completion
                                               still comes, and gives back any buffer
    accept: add_reader on the listener       an accept operation, submitted again at each
                                               completion

Rules this module keeps:
  * A buffer handed to the kernel stays alive, unmoved and unread until
    its operation's completion: the provided buffers are the proactor's,
    lent to the kernel, and each goes back to it as soon as its data was
    copied out (the protocol gets the copy); a send's bytes are held by the
    transport (``_sending``) and, through the completion callback the
    proactor keeps, by the proactor.
  * One receive and one send outstanding per transport at most: io_uring
    starts operations in any order, so a second send could overtake the
    first.
  * The protocol is called from the ready queue only (step 4), as in
    Part III: a completion callback records its result and queues the
    transport's handle.
  * ``get_write_buffer_size()`` counts the bytes not yet confirmed sent,
    those in the kernel's hands included (as CPython's proactor does):
    flow control is on what the peer has not yet taken.

Where this differs from asyncio and from Part III (tests/conformance/KNOWN_DIFFERENCES.md):
  * ``write()`` never sends at once; the send is submitted with the next
    io_uring_enter, so the write buffer is not empty right after a small
    write, and pause_writing comes for any single write above the
    high-water mark.
  * A ``sock_recv`` that is cancelled asks the kernel to cancel its
    receive; if the receive had already taken data, that data is lost
    (asyncio's ProactorEventLoop has the same property).
  * The loop runs only in the thread that first ran it (Proactor.ring).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tinyloop.aio import selector_events
from tinyloop.aio import unix_events
from tinyloop.aio.events import Handle
from tinyloop.raw import uring
from tinyloop.ring import core
from tinyloop.ring.core import proactor_type
from tinyloop.ring.proactor import Completion, Proactor, os_error, pin

__all__ = ["EventLoopPolicy", "Loop", "RingSocketTransport", "new_event_loop", "refusal", "run"]

T = TypeVar("T")

_refusal: list[str | None] = []  # tinyloop.raw.uring.unavailable()'s answer, asked once


def refusal() -> str | None:
    """Why this machine refuses tinyloop.ring, in one line, or None; asked of the kernel once.

    Importing this module works everywhere (the book documents it on any
    machine); making a loop, or taking ``new_event_loop`` from the package,
    is what refuses.
    """
    if not _refusal:
        reason = uring.unavailable()
        if reason is not None:
            _refusal.append(f"tinyloop.ring needs io_uring, and {reason}")
        else:
            _refusal.append(_provided_buffers_refused())
    return _refusal[0]


def _provided_buffers_refused() -> str | None:
    # A transport's receive takes a provided buffer (5.19): a kernel with io_uring but without
    # provided-buffer rings refuses the registration with EINVAL.
    ring = uring.Ring(entries=2)
    try:
        buffers = uring.BufferRing(ring, 1, count=1, size=4096)
    except OSError as error:
        return ("tinyloop.ring needs provided-buffer rings (Linux 5.19), and this kernel refused "
                f"one: {error.strerror}")
    finally:
        ring.close()
    buffers.close()  # (after the ring, as the proactor closes them)
    return None

# Room for any socket address (struct sockaddr_storage).
_SOCKADDR_SIZE = 128
_SOCKLEN = struct.Struct("=I")
_FAMILY = struct.Struct("=H")
_INET_PORT_ADDRESS = struct.Struct("!2xH4s")         # sockaddr_in after its family
_INET6_PORT_FLOW_ADDRESS = struct.Struct("!2xHI16s")  # sockaddr_in6 up to its scope id
_SCOPE_ID = struct.Struct("=I")                     # sockaddr_in6's last field, in host order
# Accepted descriptors come non-blocking and close-on-exec (accept4(2)).
_ACCEPT_FLAGS = socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
_STREAM_FAMILIES = (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX)


def sockaddr_to_address(raw: bytes | bytearray) -> Any:
    """Python's address tuple for an AF_INET or AF_INET6 ``struct sockaddr``; None for others.

    The layouts are ip(7)'s ``sockaddr_in`` (family, port in network order,
    four address bytes) and ipv6(7)'s ``sockaddr_in6`` (family, port,
    flowinfo, sixteen address bytes, scope id).
    """
    family = _FAMILY.unpack_from(raw)[0]
    if family == socket.AF_INET:
        port, packed = _INET_PORT_ADDRESS.unpack_from(raw)
        return socket.inet_ntop(socket.AF_INET, packed), port
    if family == socket.AF_INET6:
        port, flowinfo, packed = _INET6_PORT_FLOW_ADDRESS.unpack_from(raw)
        scope_id = _SCOPE_ID.unpack_from(raw, 24)[0]
        return socket.inet_ntop(socket.AF_INET6, packed), port, flowinfo, scope_id
    return None


def address_to_sockaddr(family: int, address: Any) -> bytes:
    """The ``struct sockaddr`` for an AF_INET ``(host, port)`` or AF_INET6
    ``(host, port[, flowinfo[, scope_id]])`` with a numeric host; the inverse
    of :func:`sockaddr_to_address`.  Raises OSError for a host that is not numeric."""
    if family == socket.AF_INET:
        host, port = address[:2]
        return (_FAMILY.pack(family) + port.to_bytes(2, "big")
                + socket.inet_pton(family, host) + bytes(8))
    host, port, flowinfo, scope_id = (*address, 0, 0)[:4]
    return (_FAMILY.pack(family) + struct.pack("!HI", port, flowinfo)
            + socket.inet_pton(family, host) + struct.pack("=I", scope_id))


class RingSocketTransport(selector_events._SelectorSocketTransport):
    """A stream socket (TCP or Unix) transport whose reads and writes are io_uring operations.

    Part III's transport, subclassed: its protocol bookkeeping, flow
    control, close/abort, write_eof, sendfile and errors are inherited;
    the reading and writing below replace readiness with completions.

    State beyond Part III's:

        _recv_op       user_data of the outstanding receive, or 0
        _recv_data     what the last receive brought, copied out of its provided buffer
        _pending       data (b"" at EOF) that completed while reading was paused
        _sending       the bytes a send is outstanding from (``_buffer[0]``), or None
        _send_offset   where in them the outstanding send started
    """

    def __init__(self, loop: Loop, sock: socket.socket, protocol: asyncio.BaseProtocol,
                 waiter: asyncio.Future | None = None, extra: dict[str, Any] | None = None,
                 server: Any = None) -> None:
        self._proactor: Proactor = loop._proactor
        self._ready = loop._ready  # (where a completion queues its handle)
        self._recv_op = 0
        self._recv_res = 0
        self._recv_data: bytes | None = None
        self._recv_handle: Handle | None = self._receive_handle(loop)
        self._pending: bytes | None = None
        self._at_eof = False
        self._sending: bytes | None = None
        self._send_offset = 0
        self._send_op = 0
        self._send_res = 0
        self._send_handle: Handle | None = Handle(self._send_done, (), loop, None)
        super().__init__(loop, sock, protocol, waiter, extra, server)

    def _receive_handle(self, loop: Loop) -> Handle:
        """The handle every completed receive puts on the ready queue (made once, reused)."""
        return Handle(self._recv_done, (), loop, None)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        # Which delivery the protocol wants; the receive itself is the same.
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)
        self._protocol = protocol

    # -- Reading: a receive always outstanding -------------------------------------------

    def _start_reading(self) -> None:
        if not self.is_reading() or self._at_eof:
            return
        if self._pending is not None:
            # Data that completed while paused: delivered from the ready
            # queue, never from inside resume_reading().
            data, self._pending = self._pending, None
            self._loop.call_soon(self._deliver, data)
        elif not self._recv_op and self._sock is not None:
            self._recv_op = self._proactor.recv_provided(self._sock_fd, self._recv_completed)

    def _recv_completed(self, res: int, flags: int) -> None:
        # In the proactor's wait (step 2): the data copied out of the buffer
        # the kernel took, which goes straight back to it, whoever is left
        # to tell; then the handle queued (None once connection_lost has run).
        self._recv_op = 0
        self._recv_res = res
        if flags & uring.CQE_F_BUFFER:
            buffers, used = self._proactor.buffers, uring.buffer_id(flags)
            self._recv_data = buffers.data(used, res)
            buffers.recycle(used)
        if self._recv_handle is not None:
            self._ready.append(self._recv_handle)

    def _recv_done(self) -> None:
        res, data, self._recv_data = self._recv_res, self._recv_data, None
        if self._closing or self._conn_lost:
            return  # a close cancelled it, or whatever it brought comes too late
        if res == -errno.ENOBUFS:
            # Every provided buffer was taken when data came, by the
            # receives completed in the same wait; they are back now, and
            # nothing was received: ask again.
            self._start_reading()
            return
        if res < 0:
            self._fatal_error(os_error(res), "Fatal read error on socket transport")
            return
        self._deliver(data if res else b"")

    def pause_reading(self) -> None:
        """Stop calling the protocol with data until :meth:`resume_reading`; idempotent.

        The receive already handed to the kernel is not taken back: if it
        completes with data, the data waits here (at most one provided
        buffer, the proactor's ``buffer_size`` bytes) and no further receive
        is submitted, so the kernel's buffer fills and TCP's window stops
        the peer, as with readiness.
        """
        if self.is_reading():
            self._paused = True

    def _deliver(self, data: bytes) -> None:
        if self._conn_lost:
            return
        if self._paused:
            self._pending = data
            return
        if self._loop._instrument is not None:  # tinyloop.trace: one receive, len(data) bytes
            self._loop._instrument.transport_read(self, len(data), 1)
        if not data:
            self._at_eof = True
            self._read_ready__on_eof()
            return
        try:
            if self._buffered:
                self._deliver_into_buffers(data)
            else:
                self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")
            return
        self._start_reading()  # the next receive, unless the protocol paused or closed us

    def _deliver_into_buffers(self, data: bytes) -> None:
        """A BufferedProtocol's delivery: copy into get_buffer()'s buffers until all is taken."""
        view = memoryview(data)
        while view:
            buffer = self._protocol.get_buffer(len(view))
            size = min(len(buffer), len(view))
            if not size:
                raise RuntimeError("get_buffer() returned an empty buffer")
            buffer[:size] = view[:size]
            self._protocol.buffer_updated(size)
            view = view[size:]

    # -- Writing: one send outstanding, its bytes held until its completion ---------------

    def write(self, data: Any) -> None:
        """Queue ``data`` (bytes-like) and, if no send is outstanding, submit one.

        Never blocks and never sends at once: the send goes to the kernel
        with the loop's next io_uring_enter.  Calls pause_writing() when the
        bytes not yet confirmed sent exceed the high-water mark.  Raises
        TypeError for a non-bytes-like, RuntimeError after write_eof() or
        during sendfile.
        """
        if not isinstance(data, selector_events._BYTES_LIKE):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to write; sendfile is in progress")
        if not data:
            return
        if self._conn_lost:
            self._conn_lost += 1
            return
        # A copy of a mutable buffer: the caller may change it before the kernel reads it.
        self._buffer.append(data if isinstance(data, bytes) else bytes(data))
        self._buffer_size += len(data)
        if self._sending is None:
            self._send_next()
        self._maybe_pause_protocol()

    def _send_next(self) -> None:
        # Everything queued goes as one send (what writev would do for a readiness loop).
        buffer = self._buffer
        if len(buffer) > 1:
            joined = b"".join(buffer)
            buffer.clear()
            buffer.append(joined)
        self._send_from(buffer[0], 0)

    def _send_from(self, data: bytes, offset: int) -> None:
        self._sending, self._send_offset = data, offset
        self._send_op = self._proactor.send(self._sock_fd, self._proactor.bytes_address(data) + offset,
                                            len(data) - offset, self._send_completed)

    def _send_completed(self, res: int, flags: int) -> None:
        data = self._sending
        if (res == len(data) - self._send_offset and len(self._buffer) == 1  # type: ignore[arg-type]
                and not (self._protocol_paused or self._closing or self._eof or self._conn_lost)
                and self._empty_waiter is None):
            # All of it sent, nothing queued behind it, and nobody to tell:
            # settled here, in step 2, with no handle for step 4 (and so no
            # iteration of the loop for this completion: Proactor.select).
            self._sending = None
            self._buffer.popleft()
            self._buffer_size -= res
            if self._loop._instrument is not None:  # tinyloop.trace: one send
                self._loop._instrument.transport_wrote(self, res, 1, self._buffer_size)
            return
        self._send_res = res
        if self._send_handle is not None:
            self._ready.append(self._send_handle)

    def _send_done(self) -> None:
        res, data, self._sending = self._send_res, self._sending, None
        if self._conn_lost:
            return  # aborted: the buffer is dropped, and so are these bytes
        if res < 0:
            exc = os_error(res)
            self._fatal_error(exc, "Fatal write error on socket transport")
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(exc)
            return
        self._buffer_size -= res
        offset = self._send_offset + res
        if offset < len(data):  # type: ignore[arg-type]
            self._send_from(data, offset)  # type: ignore[arg-type]  # a partial send: go on from there
        else:
            self._buffer.popleft()
            if self._buffer:
                self._send_next()
        if self._loop._instrument is not None:  # tinyloop.trace: one send
            self._loop._instrument.transport_wrote(self, res, 1, self._buffer_size)
        self._maybe_resume_protocol()
        if self._sending is not None:
            return
        if self._empty_waiter is not None:
            self._empty_waiter.set_result(None)
        if self._closing:
            self._call_connection_lost(None)
        elif self._eof:
            self._sock.shutdown(socket.SHUT_WR)  # type: ignore[union-attr]

    # -- Closing: cancel what is outstanding ------------------------------------------------

    def close(self) -> None:
        """Read no more (the receive is cancelled); send what is queued, then close."""
        if not self._closing:
            super().close()
            self._cancel(self._recv_op)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        super()._force_close(exc)
        self._cancel(self._recv_op)
        if self._sending is not None:
            self._cancel(self._send_op)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        # Each handle holds a bound method of ours: drop them, so that no
        # reference cycle keeps a closed transport for the cyclic GC.
        self._recv_handle = self._send_handle = None  # type: ignore[assignment]
        super()._call_connection_lost(exc)

    def _cancel(self, user_data: int) -> None:
        if user_data and not self._loop.is_closed():
            self._proactor.cancel(user_data)


if core._uring is not None:
    class CythonSocketTransport(core._uring.StreamCore, RingSocketTransport):
        """RingSocketTransport with a request's path in C (tinyloop/ring/fast.pyx's StreamCore).

        The transport of a loop on the ``cython`` core: the receive's
        completion, the delivery to the protocol, ``write``, the send and
        its completion are StreamCore's; every other method, and the
        meaning of every field, is RingSocketTransport's.  Its operations'
        completion callbacks are two TransportCompletion objects, which
        the C completion loop runs without a Python call.
        """

        def __init__(self, *args: Any) -> None:
            self._on_recv = core._uring.TransportCompletion(False)  # type: ignore[union-attr]
            self._on_send = core._uring.TransportCompletion(True)   # type: ignore[union-attr]
            super().__init__(*args)

        def _receive_handle(self, loop: Loop) -> Handle:
            # The same handle, of the class the C iteration runs without a Python call.
            return core._uring.TransportHandle(  # type: ignore[union-attr]
                core._uring.StreamCore._recv_done, (self,), loop, None)

        def _call_connection_lost(self, exc: BaseException | None) -> None:
            # Part III drops the protocol here; the bound method StreamCore
            # keeps of it (its data_received) goes too, or it would hold the
            # protocol, and a cycle through it, after the connection.
            self._data_received = None
            super()._call_connection_lost(exc)
else:
    CythonSocketTransport = None  # type: ignore[assignment,misc]


class _Acceptor:
    """A listening socket's outstanding accept, and what its connections are served with.

    ``serving`` is the argument tuple of ``Loop._start_serving``.  One
    accept is outstanding at a time; its completion queues :meth:`accepted`,
    which makes the transport and submits the next accept.
    """

    def __init__(self, loop: Loop, serving: tuple[Any, ...]) -> None:
        self.loop = loop
        self.serving = serving
        self.sock: socket.socket = serving[1]
        # The listener's family, type and protocol, which its connections share, as plain ints
        # (read once: socket.py's properties make an enum of each at every read).
        self.kind = selector_events._socket_kind(self.sock)
        self.address = bytearray(_SOCKADDR_SIZE)
        self.length = bytearray(_SOCKLEN.size)
        self.address_at, self._address_pin = pin(self.address)
        self.length_at, self._length_pin = pin(self.length)
        self.res = 0
        self.user_data = 0
        self.stopped = False
        self.handle: Handle | None = Handle(self.accepted, (), loop, None)

    def arm(self) -> None:
        _SOCKLEN.pack_into(self.length, 0, len(self.address))
        self.user_data = self.loop._proactor.accept(self.sock.fileno(), self.address_at,
                                                    self.length_at, _ACCEPT_FLAGS, self.completed)

    def completed(self, res: int, flags: int) -> None:
        if self.stopped:
            if res >= 0:
                socket.close(res)  # it completed after the cancel: a connection nobody will serve
            return
        self.res = res
        if self.handle is not None:
            self.loop._ready.append(self.handle)

    def stop(self) -> None:
        self.stopped = True
        self.handle = None  # (it holds a bound method of ours: no cycle left behind)
        if not self.loop.is_closed():
            self.loop._proactor.cancel(self.user_data)

    def accepted(self) -> None:
        res, loop = self.res, self.loop
        if self.stopped:  # between its completion and now
            if res >= 0:
                socket.close(res)
            return
        if res < 0:
            if -res in (errno.ECONNABORTED, errno.EAGAIN, errno.EINTR, errno.EPROTO):
                self.arm()  # a client that gave up before we took it
            elif -res in selector_events._OUT_OF_RESOURCES:
                loop._accept_back_off(os_error(res), *self.serving)  # rest, then a new accept
            elif -res != errno.ECANCELED:
                loop.call_exception_handler({"message": "accept failed; the listener stops",
                                             "exception": os_error(res), "socket": self.sock})
            return
        sock = self.sock
        family, kind, proto = self.kind
        conn = socket.socket(family, kind | socket.SOCK_NONBLOCK, proto, fileno=res)
        address = sockaddr_to_address(self.address)
        self.arm()
        protocol_factory, _, sslcontext, server, _, handshake_timeout, shutdown_timeout = self.serving
        if loop._accept_backoff and loop._accept_backoff.pop(sock.fileno(), None) is not None:
            selector_events.logger.info("accepting connections on %r again", sock)
        extra = {"peername": address} if address is not None else {}
        if sslcontext is None:
            loop._accept_plain(protocol_factory, conn, extra, server)
        else:
            loop.create_task(loop._accept_tls(protocol_factory, conn, extra, sslcontext, server,
                                              handshake_timeout, shutdown_timeout))


# Where the Cython core is built, Loop puts its C half in front of Part III's loop
# (tinyloop/ring/fast.pyx's LoopCore: Part II's four steps in C), as Part IV's
# Loop puts UVLoop; on the python core LoopCore hands each iteration to Part II's.
_C_BASES: tuple[type, ...] = (core._uring.LoopCore,) if core._uring is not None else ()


class Loop(*_C_BASES, unix_events.SelectorEventLoop):  # type: ignore[misc]
    """An ``asyncio.AbstractEventLoop`` on io_uring (Linux 5.6 or later), a proactor.

    ``entries`` is the submission queue's size; ``debug=None`` reads the
    environment as Part III does; ``core`` picks the proactor's ring,
    ``"cython"`` (liburing) or ``"python"`` (ctypes), None for the default
    (tinyloop/ring/core.py), and the loop's ``core`` attribute says which
    it runs on.  Raises RuntimeError, saying why in one
    line, where io_uring is missing or refused (:func:`refusal`), or where
    the Cython core is asked for and not built.  It takes no selector and no clock: the
    proactor waits, on time.monotonic (CLOCK_MONOTONIC, the clock of
    io_uring's timers).  Source of the contract: the asyncio docs, "Event Loop".
    """

    def __init__(self, *, debug: bool | None = None, entries: int = 256,
                 core: str | None = None) -> None:
        reason = refusal()
        if reason is not None:
            raise RuntimeError(reason)
        self.core, proactor = proactor_type(core)
        self._proactor: Proactor = proactor(entries)
        self._acceptors: dict[int, _Acceptor] = {}  # listener fd -> its outstanding accept
        super().__init__(self._proactor, time.monotonic, debug=debug)
        self._proactor.ready = self._ready  # what a wait checks before it waits again

    # -- Instruments: the proactor reports the SQEs and CQEs -----------------------------

    def add_instrument(self, instrument: Any) -> None:
        """Part II's add_instrument; the proactor then reports each SQE, enter and CQE too
        (the completion hooks of :class:`tinyloop.trace.instrument.Instrument`)."""
        super().add_instrument(instrument)
        self._proactor._instrument = self._instrument

    def remove_instrument(self, instrument: Any) -> bool:
        """Part II's remove_instrument; with the last one gone the proactor's hook sites are off too."""
        removed = super().remove_instrument(instrument)
        self._proactor._instrument = self._instrument
        return removed

    # -- Transports and serving ----------------------------------------------------------

    def _make_socket_transport(self, sock: socket.socket, protocol: asyncio.BaseProtocol,
                               waiter: asyncio.Future | None = None, *,
                               extra: dict[str, Any] | None = None,
                               server: Any = None) -> selector_events._SelectorSocketTransport:
        """A completion transport for a stream socket; Part III's for anything else."""
        family, kind, _ = selector_events._socket_kind(sock)
        if kind == socket.SOCK_STREAM and family in _STREAM_FAMILIES:
            if self.core == "cython":
                return CythonSocketTransport(self, sock, protocol, waiter, extra, server)
            return RingSocketTransport(self, sock, protocol, waiter, extra, server)
        return super()._make_socket_transport(sock, protocol, waiter, extra=extra, server=server)

    def _remove_interest(self, fd: Any, event: int) -> bool:
        """Part II's _remove_interest (remove_reader, remove_writer); False at once for
        a descriptor the proactor never registered.

        Part III's transport removes its reader on every close and abort
        (and its writer on an abort with data queued), and a ring
        transport's descriptor is never registered (its reads and writes
        are operations): selectors' get_key would raise, and first format,
        a KeyError for each.
        """
        if type(fd) is int and fd not in self._proactor._fd_to_key:
            return False
        return super()._remove_interest(fd, event)

    def _start_serving(self, *serving: Any) -> None:
        sock = serving[1]
        if sock.fileno() == -1:
            return  # closed while it rested
        acceptor = self._acceptors[sock.fileno()] = _Acceptor(self, serving)
        acceptor.arm()

    def _stop_serving(self, sock: socket.socket) -> None:
        acceptor = self._acceptors.pop(sock.fileno(), None)
        if acceptor is not None:
            acceptor.stop()
        super()._stop_serving(sock)

    # -- Socket operations as completions ------------------------------------------------
    #
    # Discussion: each is one operation and a future its completion sets.
    # Cancelling the awaiting task asks the kernel to cancel the operation;
    # the buffer stays alive in the completion callback until the kernel
    # has answered.  What a cancelled receive had already read is lost.

    def _operation(self, submit: Callable[[Completion], int], keep: object) -> asyncio.Future:
        future = self.create_future()

        def completed(res: int, flags: int, keep: object = keep) -> None:
            if future.done():
                return  # cancelled: this is the completion that came anyway
            if res < 0:
                future.set_exception(os_error(res))
            else:
                future.set_result(res)

        user_data = submit(completed)

        def cancel_if_cancelled(future: asyncio.Future) -> None:
            if future.cancelled() and not self.is_closed():
                self._proactor.cancel(user_data)

        future.add_done_callback(cancel_if_cancelled)
        return future

    async def sock_recv(self, sock: socket.socket, nbytes: int) -> bytes:
        """Receive up to ``nbytes`` bytes from ``sock``; b"" at EOF.  See recv(2)."""
        buffer = bytearray(nbytes)
        count = await self.sock_recv_into(sock, buffer) if nbytes else 0
        return memoryview(buffer)[:count].tobytes()

    async def sock_recv_into(self, sock: socket.socket, buf: Any) -> int:
        """Receive into the writable buffer ``buf``; return the byte count (0 at EOF)."""
        self._check_sock(sock)
        self._ensure_fd_no_transport(sock.fileno())
        view = memoryview(buf).cast("B")
        if not view:
            return 0
        address, pinned = pin(view)
        fd = sock.fileno()
        try:
            return await self._operation(
                lambda done: self._proactor.recv(fd, address, len(view), done), pinned)
        finally:
            del pinned  # (the completion callback holds it until the kernel is done)

    async def sock_sendall(self, sock: socket.socket, data: Any) -> None:
        """Send all of ``data`` on ``sock``: one send, then another for what it left.

        Raises the send error (e.g. BrokenPipeError); on cancellation some
        prefix of ``data`` may have been sent.
        """
        self._check_sock(sock)
        self._ensure_fd_no_transport(sock.fileno())
        data = data if isinstance(data, bytes) else bytes(data)
        fd, base, sent = sock.fileno(), self._proactor.bytes_address(data), 0
        while sent < len(data):
            sent += await self._operation(
                lambda done: self._proactor.send(fd, base + sent, len(data) - sent, done), data)

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, Any]:
        """Accept a connection on the listening ``sock``; return (non-blocking socket, address)."""
        self._check_sock(sock)
        self._ensure_fd_no_transport(sock.fileno())
        address, length = bytearray(_SOCKADDR_SIZE), bytearray(_SOCKLEN.size)
        _SOCKLEN.pack_into(length, 0, len(address))
        (address_at, address_pin), (length_at, length_pin) = pin(address), pin(length)
        fd = await self._operation(
            lambda done: self._proactor.accept(sock.fileno(), address_at, length_at, _ACCEPT_FLAGS,
                                               done), (address_pin, length_pin))
        family, kind, proto = selector_events._socket_kind(sock)  # (as ints, as _Acceptor reads them)
        conn = socket.socket(family, kind | socket.SOCK_NONBLOCK, proto, fileno=fd)
        peer = sockaddr_to_address(address)
        return conn, peer if peer is not None else conn.getpeername()

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        """Connect ``sock`` to ``address`` (a name is resolved first) with IORING_OP_CONNECT.

        TCP only; other families take Part III's readiness path.  Raises
        OSError (ConnectionRefusedError, ...) when the connection fails.
        """
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return await super().sock_connect(sock, address)
        self._check_sock(sock)
        infos = await self._resolve(*address[:2], family=sock.family, type=sock.type,
                                    proto=sock.proto, flags=0)
        address = infos[0][4]
        raw = address_to_sockaddr(sock.family, address)
        fd = sock.fileno()
        try:
            await self._operation(
                lambda done: self._proactor.connect(fd, self._proactor.bytes_address(raw), len(raw), done),
                raw)
        except OSError as exc:
            raise OSError(exc.errno, f"Connect call failed {address}") from None


def new_event_loop(**kwargs: Any) -> Loop:
    """A new ring :class:`Loop` (keyword arguments: its constructor's), for
    ``asyncio.Runner(loop_factory=tinyloop.ring.new_event_loop)``."""
    return Loop(**kwargs)


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """``asyncio.run(main)`` on a ring loop: what ``main`` returns or raises (see tinyloop.aio.run)."""
    with asyncio.Runner(loop_factory=new_event_loop, debug=debug) as runner:
        return runner.run(main)


class EventLoopPolicy(unix_events.EventLoopPolicy):
    """Part III's policy, making ring loops (policies are deprecated from 3.14)."""

    _loop_factory = staticmethod(new_event_loop)  # type: ignore[assignment]
