"""Sockets with ``await``: a StreamReader to read, a StreamWriter to write,
``start_server`` to accept, ``open_connection`` to connect.  The names and
the methods are asyncio's (Lib/asyncio/streams.py); underneath there is no
transport or protocol yet (those come with Part III), only the reactor's
readiness turned into Futures:

    waiter = Future()
    loop.add_reader(sock, waiter.set_result, None)   # readable -> future done
    await waiter                                      # the task sleeps until then
    loop.remove_reader(sock)

Rules this file keeps:
  * Reading is pulled: we recv only when a coroutine asks for bytes, so a
    handler that stops reading stops us reading, and the kernel's receive
    buffer and TCP's window push back on the peer.  A recv that would block
    waits for readiness and tries again (EAGAIN is the normal case).
  * Writing is pushed, with flow control: write() never blocks, it sends
    what the kernel takes and buffers the rest; ``await drain()`` is where a
    fast writer waits for a slow reader.  The buffer has a high-water mark
    (above it, drain() waits) and a low-water mark (drain() resumes once
    the buffer is back down to it), the pair asyncio's transports use.
  * A socket leaves the selector before it is closed, and closing wakes a
    reader waiting on it with ConnectionAbortedError: no task is left
    waiting on a descriptor that no longer exists.
  * At most READ_SIZE (64 KiB) bytes per recv.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from tinyloop.baseline.blocking import READ_SIZE
from tinyloop.callbacks.loop import Loop, get_running_loop
from tinyloop.callbacks.server import Listener
from tinyloop.coroutines.futures import Future
from tinyloop.coroutines.tasks import Task
from tinyloop.raw.connection import prepare
from tinyloop.serving import listen

__all__ = ["HIGH_WATER", "LIMIT", "LOW_WATER", "IncompleteReadError", "LimitOverrunError",
           "Server", "StreamReader", "StreamWriter", "open_connection", "start_server",
           "wait_readable", "wait_writable"]

# How far readuntil() looks for its separator before giving up, in bytes.
LIMIT = 64 * 1024
# A writer's flow-control marks, in bytes of unsent output (asyncio's defaults).
HIGH_WATER = 64 * 1024
LOW_WATER = 16 * 1024


class IncompleteReadError(EOFError):
    """The stream ended before ``expected`` bytes (or a separator) arrived.

    ``partial`` holds the bytes read before the end; ``expected`` is the
    number asked for, or None for readuntil().
    """

    def __init__(self, partial: bytes, expected: int | None) -> None:
        wanted = "a separator" if expected is None else f"{expected} bytes"
        super().__init__(f"{len(partial)} bytes read at end of stream, {wanted} expected")
        self.partial = partial
        self.expected = expected


class LimitOverrunError(Exception):
    """readuntil() found no separator within the stream's limit; ``consumed`` bytes are buffered."""

    def __init__(self, message: str, consumed: int) -> None:
        super().__init__(message)
        self.consumed = consumed


# -- readiness as futures -----------------------------------------------------------


def _wake(waiter: Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _wait(fileobj: Any, waiter: Future, add: Callable[..., Any],
                remove: Callable[[Any], bool]) -> None:
    # exercise readiness-future: begin
    add(fileobj, _wake, waiter)
    try:
        await waiter
    finally:
        # Also on cancellation: the task is gone, and a level-triggered
        # reader left behind would wake the loop for nobody, forever.
        remove(fileobj)
    # exercise readiness-future: end


async def wait_readable(sock: Any) -> None:
    """Suspend until ``sock`` (a socket or file descriptor) is readable: data, EOF, an error."""
    loop = get_running_loop()
    await _wait(sock, Future(loop=loop), loop.add_reader, loop.remove_reader)


async def wait_writable(sock: Any) -> None:
    """Suspend until ``sock`` is writable (room in the send buffer, a connect finished, an error)."""
    loop = get_running_loop()
    await _wait(sock, Future(loop=loop), loop.add_writer, loop.remove_writer)


# -- reading ----------------------------------------------------------------------------


class StreamReader:
    """Read bytes from a connected non-blocking socket with ``await``.

    ``limit`` (bytes) bounds how much readuntil() buffers while looking for
    its separator.  Every read method raises ConnectionError (e.g.
    ConnectionResetError) if the socket fails, and ConnectionAbortedError
    if the stream is closed while it waits.
    """

    def __init__(self, sock: socket.socket, *, loop: Loop | None = None, limit: int = LIMIT) -> None:
        self._sock = sock
        self._loop = loop if loop is not None else get_running_loop()
        self._limit = limit
        self._buffer = bytearray()
        self._eof = False
        self._closed = False
        self._waiter: Future | None = None  # set while a read waits for readiness

    def at_eof(self) -> bool:
        """True once the peer's end of stream was read and the buffer is empty."""
        return self._eof and not self._buffer

    async def _fill(self) -> None:
        """One recv into the buffer, waiting for readiness first if it would block."""
        calls = 0  # recv(2) calls, the ones that would block included (for tinyloop.trace)
        while True:
            if self._closed:
                raise ConnectionAbortedError("the stream was closed")
            calls += 1
            try:
                data = self._sock.recv(READ_SIZE)
            except BlockingIOError:
                self._waiter = Future(loop=self._loop)
                try:
                    loop = self._loop
                    await _wait(self._sock, self._waiter, loop.add_reader, loop.remove_reader)
                finally:
                    self._waiter = None
                continue
            if self._loop._instrument is not None:
                self._loop._instrument.transport_read(self, len(data), calls)
            if data:
                self._buffer += data
            else:
                self._eof = True  # recv() == b"": the peer sent FIN
            return

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (at least one), or b"" at end of stream.

        ``n < 0`` reads until end of stream and returns it all.  Returns what
        is buffered without waiting if anything is.
        """
        if n == 0:
            return b""
        if n < 0:
            while not self._eof:
                await self._fill()
            data = bytes(self._buffer)
            self._buffer.clear()
            return data
        if not self._buffer and not self._eof:
            await self._fill()
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; raises IncompleteReadError if the stream ends first."""
        if n < 0:
            raise ValueError("readexactly() needs n >= 0")
        while len(self._buffer) < n:
            if self._eof:
                partial = bytes(self._buffer)
                self._buffer.clear()
                raise IncompleteReadError(partial, n)
            await self._fill()
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        """The bytes up to and including ``separator``.

        Raises IncompleteReadError if the stream ends first (its ``partial``
        holds what was read, now consumed), LimitOverrunError if ``limit``
        bytes arrive without the separator (they stay buffered).
        """
        if not separator:
            raise ValueError("the separator must not be empty")
        start = 0
        while True:
            found = self._buffer.find(separator, start)
            if found >= 0:
                end = found + len(separator)
                data = bytes(self._buffer[:end])
                del self._buffer[:end]
                return data
            if len(self._buffer) > self._limit:
                raise LimitOverrunError(f"no {separator!r} in the first {self._limit} bytes",
                                        len(self._buffer))
            if self._eof:
                partial = bytes(self._buffer)
                self._buffer.clear()
                raise IncompleteReadError(partial, None)
            # Search only the new bytes next time (and the separator's tail).
            start = max(0, len(self._buffer) - len(separator) + 1)
            await self._fill()

    def _abort(self) -> None:
        """The socket is being closed: wake a read that waits on it with an error."""
        self._closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionAbortedError("the stream was closed"))


# -- writing ----------------------------------------------------------------------------


class StreamWriter:
    """Write bytes to a connected non-blocking socket; ``await drain()`` for flow control.

    ``write()`` never blocks and never raises for a broken connection: the
    error is kept and raised by the next ``drain()``.  Above ``high_water``
    bytes of unsent output, ``drain()`` waits until the output is down to
    ``low_water`` bytes (see :meth:`set_write_buffer_limits`).
    """

    def __init__(self, sock: socket.socket, reader: StreamReader | None = None, *,
                 loop: Loop | None = None, high_water: int = HIGH_WATER,
                 low_water: int = LOW_WATER) -> None:
        self._sock = sock
        self._reader = reader
        self._loop = loop if loop is not None else get_running_loop()
        self._buffer = bytearray()   # what the kernel has not taken yet
        self._writing = False        # is our writer callback registered?
        self._paused = False         # above the high-water mark: drain() waits
        self._drain_waiter: Future | None = None
        self._exception: BaseException | None = None
        self._closing = False
        self._closed = Future(loop=self._loop)
        self.on_close: Callable[[StreamWriter], object] | None = None
        self.set_write_buffer_limits(high_water, low_water)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Set the flow-control marks in bytes: ``low`` defaults to ``high // 4``."""
        high = HIGH_WATER if high is None else high
        low = high // 4 if low is None else low
        if not 0 <= low <= high:
            raise ValueError(f"need 0 <= low ({low}) <= high ({high})")
        self._high_water, self._low_water = high, low

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """``"socket"``, ``"peername"`` or ``"sockname"``, as asyncio's transports answer."""
        try:
            if name == "socket":
                return self._sock
            if name == "peername":
                return self._sock.getpeername()
            if name == "sockname":
                return self._sock.getsockname()
        except OSError:
            pass
        return default

    def write(self, data: bytes) -> None:
        """Send ``data`` now as far as the kernel takes it; buffer the rest.

        Raises RuntimeError after close().
        """
        if self._closing:
            raise RuntimeError("write() after close()")
        if self._exception is not None or not data:
            return
        if not self._buffer:
            # Optimistic write: the send buffer usually has room, and then
            # the data leaves without a trip through the selector.
            try:
                sent = self._sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as error:
                self._fail(error)
                return
            if self._loop._instrument is not None:  # tinyloop.trace: one send(2)
                self._loop._instrument.transport_wrote(self, sent, 1, len(data) - sent)
            data = memoryview(data)[sent:]
            if not data:
                return
        self._buffer += data
        if not self._writing:
            self._loop.add_writer(self._sock, self._on_writable)
            self._writing = True
        # exercise flow-control: begin
        if not self._paused and len(self._buffer) > self._high_water:
            self._paused = True  # drain() will wait from now on
        # exercise flow-control: end

    def _on_writable(self) -> None:
        """The reactor's writer callback: send what is buffered, release drain() when low."""
        try:
            sent = self._sock.send(self._buffer)
        except BlockingIOError:
            return
        except OSError as error:
            self._fail(error)
            return
        del self._buffer[:sent]
        if self._loop._instrument is not None:
            self._loop._instrument.transport_wrote(self, sent, 1, len(self._buffer))
        # exercise flow-control: begin
        if self._paused and len(self._buffer) <= self._low_water:
            self._paused = False
            self._wake_drain()
        # exercise flow-control: end
        if not self._buffer:
            self._loop.remove_writer(self._sock)
            self._writing = False
            if self._closing:
                self._close_now(graceful=True)

    async def drain(self) -> None:
        """Wait while the unsent output is above the high-water mark.

        Returns at once below it.  Raises the connection's error
        (ConnectionResetError, BrokenPipeError...) if sending has failed,
        ConnectionAbortedError if the writer was closed while waiting.
        """
        if self._exception is not None:
            raise self._exception
        # exercise flow-control: begin
        if self._paused:
            self._drain_waiter = Future(loop=self._loop)
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None
        # exercise flow-control: end

    def _wake_drain(self, error: BaseException | None = None) -> None:
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def _fail(self, error: BaseException) -> None:
        """Sending failed (the peer reset or went away): keep the error, drop the output, close."""
        self._exception = error
        self._buffer.clear()
        self._wake_drain(error)
        self._close_now(graceful=False)

    def is_closing(self) -> bool:
        return self._closing or self._closed.done()

    def close(self) -> None:
        """Close once the buffered output is sent (at once if there is none); idempotent.

        The end of stream (FIN) follows the last byte; a reader waiting on
        the same socket is woken with ConnectionAbortedError.
        """
        if self._closing:
            return
        self._closing = True
        if not self._buffer:
            self._close_now(graceful=self._exception is None)

    def abort(self) -> None:
        """Close now, dropping any unsent output."""
        self._closing = True
        self._buffer.clear()
        self._close_now(graceful=False)

    async def wait_closed(self) -> None:
        """Wait until the socket is really closed (its output sent, or dropped)."""
        await self._closed

    def _close_now(self, *, graceful: bool) -> None:
        if self._closed.done():
            return
        if self._reader is not None:
            self._reader._abort()
        # Out of the selector first: the number is reused by the next accept.
        self._loop.remove_reader(self._sock)
        self._loop.remove_writer(self._sock)
        self._writing = False
        if graceful:
            try:
                self._sock.shutdown(socket.SHUT_WR)  # FIN after the last byte
            except OSError:
                pass
        self._sock.close()
        self._wake_drain(ConnectionAbortedError("the writer was closed"))
        self._closed.set_result(None)
        if self.on_close is not None:
            self.on_close(self)


# -- servers and clients --------------------------------------------------------------------

ClientCallback = Callable[[StreamReader, StreamWriter], Coroutine[Any, Any, Any]]


class Server:
    """Accepts connections and runs ``client_connected_cb(reader, writer)`` as a Task for each.

    Made by :func:`start_server`.  ``close()`` stops accepting and aborts
    every connection still open.
    """

    def __init__(self, loop: Loop, sock: socket.socket, client_connected_cb: ClientCallback, *,
                 limit: int = LIMIT, owns_socket: bool = False) -> None:
        self._loop = loop
        self._sock = sock
        self._callback = client_connected_cb
        self._limit = limit
        self._owns_socket = owns_socket
        self._writers: set[StreamWriter] = set()
        self._serving = False
        self._closed = Future(loop=loop)
        # Accepting, and resting after EMFILE, is the callbacks server's Listener.
        self._listener = Listener(loop, sock, "coroutines", self._on_connection)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    def is_serving(self) -> bool:
        return self._serving

    def _start(self) -> None:
        self._listener.start()
        self._serving = True

    def _on_connection(self, sock: socket.socket) -> None:
        # sock is non-blocking, with TCP_NODELAY
        reader = StreamReader(sock, loop=self._loop, limit=self._limit)
        writer = StreamWriter(sock, reader, loop=self._loop)
        writer.on_close = self._writers.discard
        self._writers.add(writer)
        Task(self._callback(reader, writer), loop=self._loop)

    def close(self) -> None:
        """Stop accepting and abort open connections; idempotent."""
        if self._closed.done():
            return
        self._serving = False
        self._listener.close()
        if self._owns_socket:
            self._sock.close()
        for writer in list(self._writers):
            writer.abort()
        self._closed.set_result(None)

    async def wait_closed(self) -> None:
        await self._closed

    async def serve_forever(self) -> None:
        """Serve until cancelled; then close."""
        try:
            await Future(loop=self._loop)
        finally:
            self.close()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


async def start_server(client_connected_cb: ClientCallback, host: str | None = None,
                       port: int | None = None, *, sock: socket.socket | None = None,
                       limit: int = LIMIT, backlog: int = 100) -> Server:
    """Accept TCP connections and serve each with ``client_connected_cb(reader, writer)``.

    Either ``sock`` (a bound, listening socket, which stays the caller's to
    close) or ``host`` and ``port`` (we bind and listen; ``close()`` closes
    it).  Returns the :class:`Server`, already accepting.
    """
    loop = get_running_loop()
    if sock is None:
        if port is None:
            raise ValueError("start_server() needs sock, or host and port")
        sock, owns = listen(host or "127.0.0.1", port, backlog=backlog), True
    else:
        owns = False
    server = Server(loop, sock, client_connected_cb, limit=limit, owns_socket=owns)
    server._start()
    return server


async def open_connection(host: str, port: int, *, limit: int = LIMIT) -> tuple[StreamReader, StreamWriter]:
    """Connect to ``(host, port)`` over TCP; return ``(reader, writer)``.

    Tries each address getaddrinfo() gives until one connects; raises the
    last OSError (e.g. ConnectionRefusedError) if none does.  Discussion:
    getaddrinfo() itself blocks (asyncio runs it in a thread); with a numeric
    host, as in our tests and benchmarks, it returns at once.
    """
    loop = get_running_loop()
    error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (errno.EINPROGRESS, errno.EWOULDBLOCK):
                # connect(2): "completion can be awaited by selecting the socket for writing",
                # then SO_ERROR says whether it worked.
                await wait_writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        prepare(sock)
        reader = StreamReader(sock, loop=loop, limit=limit)
        return reader, StreamWriter(sock, reader, loop=loop)
    assert error is not None
    raise error
