"""TLS as a protocol between two transports.  The loop's plain transport (a
TCP socket) carries ciphertext and calls SSLProtocol, as it would call any
protocol; SSLProtocol runs OpenSSL over two memory buffers and gives the
application's protocol a transport of its own, _SSLProtocolTransport, that
carries plaintext:

    app protocol  <-- plaintext -->  _SSLProtocolTransport
                                             |
                                        SSLProtocol:  incoming MemoryBIO --> SSLObject
                                             |        outgoing MemoryBIO <--
    plain transport  <-- ciphertext -->  the loop, the socket

OpenSSL never sees the socket.  The ciphertext the plain transport receives
is written into the incoming BIO; SSLObject's do_handshake(), read(),
write() and unwrap() consume it and leave the records they make in the
outgoing BIO, which we empty into the plain transport.  So TLS here is
sans-I/O, like our HTTP parser: bytes in, bytes out, and the loop needs no
code of its own for it (the ``ssl`` docs, "Memory BIO Support").

The session's states (SSLProtocol._state) and what moves it between them:

  state      what is going on                  event                        next
  ---------  --------------------------------  ---------------------------  ---------
  NEW        nothing yet                       connection_made()            HANDSHAKE
  HANDSHAKE  do_handshake() trades records;    handshake done               WRAPPED
             app writes wait in the backlog    it fails, times out, or the  CLOSED
                                                 peer closes
  WRAPPED    application data flows both ways  app close(), the peer's      SHUTDOWN
                                                 close_notify or EOF
                                               fatal error, app abort()     CLOSED
  SHUTDOWN   our close_notify is sent; we      unwrap() done, EOF, or data  CLOSED
             wait for the peer's                 crossing our close_notify
                                               timeout, app abort()         CLOSED
  CLOSED     TLS is over; the plain transport is closing (or gone)

connection_lost() may come in any state (a reset): it moves us to CLOSED
too, and it is the only place the app protocol hears connection_lost().

Rules this file keeps:
  * One step per state.  Every event (ciphertext in, EOF, a resumed reader,
    close()) calls _advance(), which runs the current state's step and, when
    that step moved the state on, the new state's step too; the app's
    write() runs only the writing half of WRAPPED's step.  Every move goes
    through _set_state(), which checks it against _TRANSITIONS, the table
    above in code.
  * No outgoing ciphertext waits here.  Every record OpenSSL makes goes to
    the plain transport at once, so the plain transport's buffer is the
    app's write buffer: its pause_writing/resume_writing reach the app, and
    the app's write-buffer limits are its limits.
  * The app protocol hears connection_made once (unless start_tls already
    connected it), then data, at most one eof_received, and connection_lost
    exactly once, only if it heard connection_made.
  * Only public loop API: call_soon, call_later, call_exception_handler,
    get_debug.  The same file runs on asyncio's loop, uvloop and ours.

Read beside CPython's Lib/asyncio/sslproto.py: the classes and the steps
have its names (SSLProtocol, _SSLProtocolTransport, _do_handshake,
_do_read, _do_write, _do_shutdown).  Its state UNWRAPPED is our NEW and
CLOSED; it has a FLUSHING state between WRAPPED and SHUTDOWN, and its own
write buffer with water marks, which the second rule makes unnecessary
here.  Each other difference is a Discussion below.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import ssl
import warnings
from typing import Any

from tinyloop.aio.transports import source_traceback, unclosed_message

__all__ = ["SSL_HANDSHAKE_TIMEOUT", "SSL_SHUTDOWN_TIMEOUT", "SSLHandshakeTimeoutError",
           "SSLProtocol"]

logger = logging.getLogger("asyncio")  # where asyncio programs look for the loop's messages

# Seconds a handshake, and a shutdown, may take by default (asyncio's values).
SSL_HANDSHAKE_TIMEOUT = 60.0
SSL_SHUTDOWN_TIMEOUT = 30.0

# The most plaintext one TLS record carries, in bytes (RFC 8446 section 5.1).
# SSLObject.read() returns at most one record's contents (SSL_read(3)), so
# this is how much we ask it for.
MAX_PLAINTEXT_RECORD = 2 ** 14

# Writes after close are dropped; from this many on, each one is logged
# (asyncio's LOG_THRESHOLD_FOR_CONNLOST_WRITES).
LOG_THRESHOLD_FOR_DROPPED_WRITES = 5


class SSLHandshakeTimeoutError(ConnectionAbortedError, TimeoutError):
    """The TLS handshake took longer than ``ssl_handshake_timeout`` seconds.

    Discussion: asyncio's loops fail the handshake with ConnectionAbortedError;
    a caller that thinks "timeout" writes ``except TimeoutError``.  This
    class is both, so code written either way catches it.
    """


class _State(enum.Enum):
    NEW = "NEW"
    HANDSHAKE = "HANDSHAKE"
    WRAPPED = "WRAPPED"
    SHUTDOWN = "SHUTDOWN"
    CLOSED = "CLOSED"


# Every move the header's table allows, and no other (see _set_state).
_TRANSITIONS = {
    _State.NEW: {_State.HANDSHAKE},
    _State.HANDSHAKE: {_State.WRAPPED, _State.CLOSED},
    _State.WRAPPED: {_State.SHUTDOWN, _State.CLOSED},
    _State.SHUTDOWN: {_State.CLOSED},
    _State.CLOSED: set(),
}


class _SSLProtocolTransport(asyncio.Transport):
    """The transport the app protocol gets: it writes and reads plaintext.

    Every method asks the SSLProtocol behind it; this class holds only
    ``_closed`` (close() or abort() was called, or the connection ended).
    """

    # asyncio's start_tls() upgrades only transports that say they can be
    # upgraded: with this, TLS can run inside TLS (a proxy's tunnel).
    _start_tls_compatible = True

    def __init__(self, ssl_protocol: SSLProtocol) -> None:
        super().__init__()
        self._ssl_protocol = ssl_protocol
        self._closed = False
        self._source_traceback = source_traceback(ssl_protocol._loop)

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # The default argument keeps warnings.warn reachable at interpreter
        # exit, when module globals may already be None.
        if not self._closed:
            self._closed = True
            _warn(unclosed_message(self), ResourceWarning, source=self)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """TLS facts (``sslcontext``; after the handshake ``ssl_object``,
        ``peercert``, ``cipher``, ``compression``), else the plain transport's
        (``socket``, ``peername``, ``sockname``, ...); ``default`` if neither has it."""
        return self._ssl_protocol._get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._ssl_protocol._set_app_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._ssl_protocol._app_protocol

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Send what is written, then close_notify; connection_lost(None) follows.

        No more data reaches the protocol.  The close takes at most
        ``ssl_shutdown_timeout`` seconds; after that the connection is
        aborted and connection_lost gets a TimeoutError.  Idempotent.
        """
        if not self._closed:
            self._closed = True
            self._ssl_protocol._start_shutdown()

    def abort(self) -> None:
        """Close at once: unsent data is dropped, no close_notify is sent.

        connection_lost(None) follows.  Also cuts short a close() in progress.
        """
        self._closed = True
        self._ssl_protocol._abort()

    def is_reading(self) -> bool:
        return not self._closed and not self._ssl_protocol._app_reading_paused

    def pause_reading(self) -> None:
        """Stop calling the protocol with data; the plain transport stops reading too.

        Idempotent, and a no-op once closing (asyncio docs, ReadTransport).
        """
        self._ssl_protocol._pause_reading()

    def resume_reading(self) -> None:
        """Deliver data again, first what arrived before the pause took hold."""
        self._ssl_protocol._resume_reading()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and send ``data``; never blocks.

        Before the handshake completes the bytes wait in a backlog.  After
        close() they are dropped (and logged from the fifth time on), as
        asyncio's transports do.  Raises TypeError for a non-bytes-like.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if data:
            self._ssl_protocol._write_app_data(data)

    def write_eof(self) -> None:
        """Not supported over TLS (asyncio's SSL transports raise the same).

        Discussion: TLS 1.3 allows a half-close (RFC 8446 section 6.1), but
        once OpenSSL has sent our close_notify it refuses the peer's data
        (SSL_R_APPLICATION_DATA_AFTER_CLOSE_NOTIFY), so we could send our
        EOF but not read on after it.
        """
        raise NotImplementedError("TLS transports do not support write_eof()")

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        """Bytes written but not yet sent: plaintext in the backlog plus the
        plain transport's buffered ciphertext."""
        return self._ssl_protocol._get_write_buffer_size()

    @property
    def _protocol_paused(self) -> bool:
        # The protocol has heard pause_writing and not yet resume_writing:
        # loop.sendfile's fallback reads this before it stands in front of it.
        return self._ssl_protocol._app_writing_paused

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """``(low, high)`` in bytes: the plain transport's marks (see the header)."""
        return self._ssl_protocol._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Set the high- and low-water marks, in bytes, on the plain transport's
        buffer, whose pause_writing/resume_writing the app protocol receives.

        Raises ValueError unless ``high >= low >= 0`` (asyncio docs,
        WriteTransport.set_write_buffer_limits).
        """
        self._ssl_protocol._transport.set_write_buffer_limits(high, low)


class SSLProtocol(asyncio.Protocol):
    """TLS over a plain transport, for an app protocol that sees plaintext.

    ``loop`` is any asyncio event loop.  ``app_protocol`` is an
    ``asyncio.Protocol`` or an ``asyncio.BufferedProtocol``.  ``sslcontext``
    is an ``ssl.SSLContext``, or None for a client with
    ``ssl.create_default_context()`` (ValueError on the server side, which
    needs its certificate).  ``waiter`` is a Future or None: it gets the
    result None when the handshake completes, or its exception: an
    ``ssl.SSLError`` (``ssl.SSLCertVerificationError``, alias
    ``ssl.CertificateError``, when the peer's certificate or name does not
    check out), ConnectionResetError when the peer closes during the
    handshake, :class:`SSLHandshakeTimeoutError` (a TimeoutError and a
    ConnectionAbortedError) after ``ssl_handshake_timeout`` seconds.
    ``server_hostname`` is the name a client sends (SNI) and, with the
    context's ``check_hostname``, checks the certificate against
    (ValueError if that is set and no name is given; ``""`` turns the check
    off, as in asyncio; ignored on the server side).  ``call_connection_made=False`` is for start_tls:
    the app protocol is connected already and gets no second
    connection_made.  ``ssl_handshake_timeout`` and ``ssl_shutdown_timeout``
    are seconds (default 60 and 30), ValueError unless positive.

    ``self._app_transport`` is the transport for the app protocol; the
    plain transport arrives through :meth:`connection_made`.

    Sources: the ``ssl`` docs ("Memory BIO Support", SSLObject), the
    asyncio docs ("Transports and Protocols"), RFC 8446 (TLS 1.3).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, app_protocol: asyncio.BaseProtocol,
                 sslcontext: ssl.SSLContext | None, waiter: asyncio.Future | None,
                 server_side: bool = False, server_hostname: str | None = None,
                 call_connection_made: bool = True, ssl_handshake_timeout: float | None = None,
                 ssl_shutdown_timeout: float | None = None) -> None:
        self._handshake_timeout = _positive(ssl_handshake_timeout, SSL_HANDSHAKE_TIMEOUT,
                                            "ssl_handshake_timeout")
        self._shutdown_timeout = _positive(ssl_shutdown_timeout, SSL_SHUTDOWN_TIMEOUT,
                                           "ssl_shutdown_timeout")
        if sslcontext is None:
            if server_side:
                raise ValueError("a TLS server needs an SSLContext holding its certificate")
            sslcontext = ssl.create_default_context()
            if not server_hostname:
                sslcontext.check_hostname = False  # no name to check against
        if server_side:
            server_hostname = None
        elif server_hostname == "":
            # asyncio's documented opt-out: an empty name disables hostname
            # matching (the asyncio docs, create_connection), whatever the
            # context's check_hostname says.
            server_hostname = None
        elif sslcontext.check_hostname and server_hostname is None:
            # Discussion: SSLContext.wrap_socket refuses this, but wrap_bio
            # does not, and OpenSSL then checks no name at all: any
            # certificate the CAs signed would pass, whoever it names.
            raise ValueError("check_hostname requires server_hostname")
        self._loop = loop
        self._waiter = waiter
        self._server_side = server_side
        # TLS, sans I/O:
        self._incoming = ssl.MemoryBIO()  # ciphertext in, waiting for OpenSSL
        self._outgoing = ssl.MemoryBIO()  # records OpenSSL made (always emptied at once)
        self._sslobj = sslcontext.wrap_bio(self._incoming, self._outgoing,
                                           server_side=server_side, server_hostname=server_hostname)
        self._extra: dict[str, Any] = {"sslcontext": sslcontext}  # more after the handshake
        # The session:
        self._state = _State.NEW
        self._transport: Any = None           # the plain transport, from connection_made
        self._eof = False                     # the peer shut down its side of TCP
        self._exc: BaseException | None = None  # why we ended, for connection_lost
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._shutdown_timer: asyncio.TimerHandle | None = None
        # Writing:
        self._backlog: collections.deque[bytes] = collections.deque()  # plaintext OpenSSL has not taken
        self._backlog_size = 0                # bytes in _backlog
        self._plain_writing_paused = False    # the plain transport called our pause_writing
        self._app_writing_paused = False      # we called the app's pause_writing
        self._dropped_writes = 0
        # The app's side:
        self._app_reading_paused = False      # the app called pause_reading
        self._app_connected = not call_connection_made  # heard connection_made, not yet _lost
        self._set_app_protocol(app_protocol)
        self._app_transport = _SSLProtocolTransport(self)

    def __repr__(self) -> str:
        side = "server" if self._server_side else "client"
        return f"<SSLProtocol {side} {self._state.value}>"

    def _set_app_protocol(self, app_protocol: asyncio.BaseProtocol) -> None:
        self._app_protocol: Any = app_protocol
        self._app_buffered = isinstance(app_protocol, asyncio.BufferedProtocol)

    def _set_state(self, new: _State) -> None:
        """Move to ``new``: the only assignment to ``_state`` after __init__."""
        if new not in _TRANSITIONS[self._state]:
            raise RuntimeError(f"TLS state {self._state.value} cannot go to {new.value}")
        self._state = new

    # -- Events from the plain transport -------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """The plain transport is connected: start the handshake (NEW -> HANDSHAKE).

        A client's first step sends its ClientHello; a server's waits for it.
        """
        self._transport = transport
        self._set_state(_State.HANDSHAKE)
        self._handshake_timer = self._loop.call_later(self._handshake_timeout,
                                                      self._on_handshake_timeout)
        self._advance()

    def data_received(self, data: bytes) -> None:
        """Ciphertext arrived: give it to OpenSSL and take the next step.

        Discussion: asyncio's SSLProtocol is a BufferedProtocol, so the
        socket reads into one buffer it keeps instead of a new bytes object
        per read; the bytes are copied into the BIO either way.  A plain
        Protocol is the shorter read, and every transport supports it.
        """
        self._incoming.write(data)
        self._advance()

    def eof_received(self) -> bool:
        """The peer shut down its side of TCP: no more ciphertext will come.

        Each state's step sees ``_eof`` when OpenSSL asks for more.  Returns
        True so the plain transport stays open: we close it ourselves, after
        our close_notify.
        """
        self._eof = True
        self._advance()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        """The plain transport is closed, whatever the state: the end of every path.

        ``exc`` is the plain transport's error, or None; if None, the app
        protocol gets ours (the reason we aborted), which is also None after
        a clean close.
        """
        if exc is None:
            exc = self._exc
        if self._state is not _State.CLOSED:
            self._set_state(_State.CLOSED)
        for timer in (self._handshake_timer, self._shutdown_timer):
            if timer is not None:
                timer.cancel()
        self._app_transport._closed = True  # ended: nothing for __del__ to warn about
        self._wake_waiter(exc if exc is not None else
                          ConnectionResetError("the connection closed during the TLS handshake"))
        try:
            if self._app_connected:
                self._app_connected = False
                self._app_protocol.connection_lost(exc)
        finally:
            # Discussion: the app's protocol usually keeps its transport,
            # which points back at us, and we point at both: a cycle that
            # would keep the SSLContext, the SSLObject and its buffers alive
            # until the cyclic GC runs, long after the connection.  We let
            # go of our side now, as asyncio does; the app's transport
            # still answers (is_closing, get_extra_info) through us.
            self._transport = None
            self._app_transport = None
            self._app_protocol = None

    def pause_writing(self) -> None:
        """The plain transport's buffer rose above its high-water mark."""
        self._plain_writing_paused = True
        self._control_app_writing()

    def resume_writing(self) -> None:
        """The plain transport's buffer fell to its low-water mark."""
        self._plain_writing_paused = False
        self._control_app_writing()

    # -- The state machine ---------------------------------------------------------------

    def _advance(self) -> None:
        """Take the current state's step, and the next state's if the step moved us.

        Each step runs until OpenSSL needs ciphertext we do not have yet.
        An exception from a step (a bad record, an app callback that raised)
        is fatal: see :meth:`_fatal_error`.

        Discussion: an app callback inside a step may call close() or
        write(), which re-enter here.  That is safe because each step looks at
        the state before it acts, and the loop below re-reads the state after
        every step: a step that finds nothing to do does nothing.
        """
        try:
            while True:
                state = self._state
                if state is _State.HANDSHAKE:
                    self._do_handshake()
                elif state is _State.WRAPPED:
                    self._do_read()
                    self._do_write()
                elif state is _State.SHUTDOWN:
                    self._do_shutdown()
                if self._state is state:
                    return
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on TLS connection")

    def _flush(self) -> None:
        """Hand the records OpenSSL has made to the plain transport."""
        data = self._outgoing.read()
        if data:
            self._transport.write(data)

    # -- HANDSHAKE -----------------------------------------------------------------------

    def _do_handshake(self) -> None:
        """HANDSHAKE's step: move the handshake on with the records we have."""
        try:
            self._sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            if self._eof:
                self._fail_handshake(ConnectionResetError(
                    "the peer closed the connection during the TLS handshake"))
            return
        except ssl.SSLError as exc:  # SSLCertVerificationError among them
            # Discussion: OpenSSL has written an alert saying why (RFC 8446
            # section 6.2); _flush sends it and _fail_handshake closes, not
            # aborts, so the peer reads "bad certificate" rather than a reset.
            self._flush()
            self._fail_handshake(exc)
            return
        self._flush()  # a server's last flight, a client's Finished
        self._on_handshake_complete()

    def _on_handshake_complete(self) -> None:
        """HANDSHAKE -> WRAPPED: record what the handshake agreed, connect the app."""
        self._handshake_timer.cancel()  # type: ignore[union-attr]
        self._set_state(_State.WRAPPED)
        sslobj = self._sslobj
        self._extra.update(ssl_object=sslobj, peercert=sslobj.getpeercert(),
                           cipher=sslobj.cipher(), compression=sslobj.compression())
        if not self._app_connected:
            self._app_connected = True
            self._app_protocol.connection_made(self._app_transport)
        self._wake_waiter(None)
        # _advance goes on with WRAPPED's step: the backlog, and any app data
        # that came in the same segment as the handshake's last records.

    def _fail_handshake(self, exc: BaseException, *, abort: bool = False) -> None:
        """HANDSHAKE -> CLOSED: the waiter gets ``exc``; the app protocol never connected.

        Not reported to the exception handler: the waiter's owner
        (create_connection, start_tls, a server's accept) decides.
        """
        if self._loop.get_debug():
            logger.debug("%r: TLS handshake failed: %r", self, exc)
        self._wake_waiter(exc)
        self._end(exc, abort=abort)

    def _on_handshake_timeout(self) -> None:
        if self._state is _State.HANDSHAKE:
            self._fail_handshake(SSLHandshakeTimeoutError(
                f"SSL handshake is taking longer than {self._handshake_timeout} seconds: "
                f"aborting the connection"), abort=True)

    def _wake_waiter(self, exc: BaseException | None) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():  # done: cancelled by its owner
            return
        if exc is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(exc)

    # -- WRAPPED -----------------------------------------------------------------------------

    def _do_read(self) -> None:
        """WRAPPED's step, reading: decrypt and deliver, record by record.

        Stops when OpenSSL needs more ciphertext, when the app pauses
        reading, or at the end of the peer's data: its close_notify
        (read() returns nothing), or the TCP EOF once no whole record is left.
        """
        while self._state is _State.WRAPPED and not self._app_reading_paused:
            try:
                if self._app_buffered:
                    buffer = self._app_protocol.get_buffer(-1)
                    if not len(buffer):
                        raise RuntimeError("get_buffer() returned an empty buffer")
                    count = self._sslobj.read(len(buffer), buffer)
                else:
                    data = self._sslobj.read(MAX_PLAINTEXT_RECORD)
                    count = len(data)
            except ssl.SSLWantReadError:
                if not self._eof:
                    break
                count = 0  # EOF without close_notify: see _peer_closed
            if not count:
                self._peer_closed()
                break
            if self._app_buffered:
                self._app_protocol.buffer_updated(count)
            else:
                self._app_protocol.data_received(data)
        self._flush()  # reading can make records too (a TLS 1.3 KeyUpdate's answer)

    def _peer_closed(self) -> None:
        """The peer's data is over: the app hears eof_received, then we shut down.

        Discussion: a TCP EOF without close_notify could be an attacker
        cutting the stream short (RFC 8446 section 6.1 calls it truncation).
        asyncio, like ``ssl.SSLSocket`` with ``suppress_ragged_eofs=True``,
        treats it as a normal end and so do we; a protocol that knows its
        length (HTTP's Content-Length) can tell a short body itself.
        """
        keep_open = self._app_protocol.eof_received()
        if keep_open:
            logger.warning("%r: eof_received() returned true, which has no effect over TLS", self)
        self._start_shutdown()

    def _write_app_data(self, data: bytes | bytearray | memoryview) -> None:
        """The app wrote ``data``: queue it and, once WRAPPED, encrypt it now."""
        if self._app_transport is None or self._app_transport._closed:  # from SHUTDOWN on
            self._dropped_writes += 1
            if self._dropped_writes >= LOG_THRESHOLD_FOR_DROPPED_WRITES:
                logger.warning("%r: write() after the TLS connection was closed", self)
            return
        # A copy: the caller may reuse its bytearray as soon as write() returns.
        data = bytes(data)
        self._backlog.append(data)
        self._backlog_size += len(data)
        # Discussion: not _advance(), which would also read, and call the
        # app's data_received from inside the app's own write().
        try:
            self._do_write()
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on TLS connection")

    def _do_write(self) -> None:
        """WRAPPED's step, writing: encrypt the backlog, in order, and send it.

        Only WRAPPED encrypts app data: before it, the backlog waits for the
        handshake.
        """
        while self._backlog and self._state is _State.WRAPPED:
            data = self._backlog[0]
            try:
                count = self._sslobj.write(data)
            except ssl.SSLWantReadError:
                break  # a TLS 1.2 renegotiation waits for the peer's answer
            self._backlog_size -= count
            if count < len(data):
                self._backlog[0] = data[count:]
            else:
                self._backlog.popleft()
        self._flush()
        self._control_app_writing()

    def _control_app_writing(self) -> None:
        """Pause or resume the app's writing: the one place that decides.

        The app is paused while the plain transport is (its buffer is above
        its high-water mark), and while plaintext waits in our backlog (for
        the handshake or a renegotiation).

        Discussion: asyncio instead stops moving ciphertext into the plain
        transport when that pauses, and keeps water marks of its own (512 KiB
        high) over the plaintext and ciphertext it then holds: a slow reader
        costs 64 KiB + 512 KiB per connection before the app is told.  Here
        no ciphertext waits, so the plain transport's marks (64 KiB on
        asyncio's loops) are the only ones, and set_write_buffer_limits on
        the app's transport sets them.
        """
        paused = self._plain_writing_paused or bool(self._backlog)
        if paused == self._app_writing_paused or not self._app_connected:
            return
        self._app_writing_paused = paused
        callback = self._app_protocol.pause_writing if paused else self._app_protocol.resume_writing
        try:
            callback()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler({
                "message": f"protocol.{callback.__name__}() failed",
                "exception": exc, "transport": self._app_transport, "protocol": self._app_protocol,
            })

    def _get_write_buffer_size(self) -> int:
        plain = 0 if self._transport is None else self._transport.get_write_buffer_size()
        return self._backlog_size + plain

    def _pause_reading(self) -> None:
        """The app paused reading: stop delivering, and stop the plain transport reading.

        Discussion: what is already in the incoming BIO waits there (at most
        one recv's worth), and the kernel's buffer and TCP's window hold the
        rest back.  asyncio instead keeps reading into the BIO until 256 KiB
        of ciphertext wait, then pauses the plain transport.
        """
        if self._state is not _State.WRAPPED or self._app_reading_paused:
            return  # before WRAPPED the app has no transport; after it, no data comes
        self._app_reading_paused = True
        self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if not self._app_reading_paused:
            return
        self._app_reading_paused = False
        if self._state is _State.WRAPPED:
            self._transport.resume_reading()
            # What arrived before the pause took hold is still in the BIO:
            # deliver it in the next iteration, not inside the app's own call.
            self._loop.call_soon(self._advance)

    # -- SHUTDOWN ----------------------------------------------------------------------------

    def _start_shutdown(self) -> None:
        """The app closed, or the peer's data ended: WRAPPED -> SHUTDOWN.

        From HANDSHAKE the connection is aborted; from SHUTDOWN and CLOSED
        there is nothing more to do.  The timer bounds everything that is
        left, our close_notify and the plain transport's own close included.
        """
        if self._app_transport is not None:  # None once the connection is lost
            self._app_transport._closed = True
        if self._state is _State.HANDSHAKE:
            self._fail_handshake(ConnectionAbortedError("closed during the TLS handshake"),
                                 abort=True)
            return
        if self._state is not _State.WRAPPED:
            return
        self._set_state(_State.SHUTDOWN)
        self._shutdown_timer = self._loop.call_later(self._shutdown_timeout,
                                                     self._on_shutdown_timeout)
        if self._app_reading_paused:  # the peer's close_notify must get through
            self._app_reading_paused = False
            self._transport.resume_reading()
        self._advance()

    def _do_shutdown(self) -> None:
        """SHUTDOWN's step: send our close_notify, and end once the peer's has come.

        Discussion: a peer that is still sending when our close_notify
        leaves is no error of ours: OpenSSL 3 refuses the data that crosses
        it (SSL_R_APPLICATION_DATA_AFTER_CLOSE_NOTIFY), we have sent all we
        meant to, and we close without waiting for the peer's close_notify.

        A peer that has already shut down its side of TCP gets no
        close_notify from us, as from asyncio: it has stopped reading TLS
        (ssl.SSLSocket.shutdown drops the TLS layer), and the record would
        reach it as stray bytes before our EOF.
        """
        if self._eof:
            self._end(None, abort=False)
            return
        try:
            self._sslobj.unwrap()
        except ssl.SSLWantReadError:
            self._flush()
            if not self._eof:
                return  # the peer's close_notify is on its way
        except ssl.SSLError:
            pass
        else:
            self._flush()
        self._end(None, abort=False)

    def _on_shutdown_timeout(self) -> None:
        self._end(TimeoutError("SSL shutdown timed out"), abort=True)

    # -- CLOSED ------------------------------------------------------------------------------

    def _end(self, exc: BaseException | None, *, abort: bool) -> None:
        """Enter CLOSED and close (flushing) or abort the plain transport.

        Called again once CLOSED, an abort still aborts: abort() after
        close(), or the shutdown timer while the plain transport flushes.
        ``exc`` is remembered for the app's connection_lost.
        """
        if self._state is _State.CLOSED and not abort:
            return
        if self._exc is None:
            self._exc = exc
        if self._state is not _State.CLOSED:
            self._set_state(_State.CLOSED)
            self._app_transport._closed = True
        if self._transport is None:  # the plain transport is gone already
            return
        if abort:
            self._transport.abort()
        else:
            self._transport.close()

    def _abort(self) -> None:
        if self._state is not _State.NEW:
            self._end(None, abort=True)

    def _fatal_error(self, exc: BaseException, message: str) -> None:
        """An error nothing can recover from: report it, fail the waiter, abort.

        The app protocol gets ``exc`` in connection_lost.  A ConnectionError
        (a reset, a broken pipe) is the peer's ordinary way of leaving and is
        not reported; anything else (an ssl.SSLError after the handshake, an
        app callback that raised) goes to the loop's exception handler.

        Discussion: asyncio reports no OSError at all here, and ssl.SSLError
        is an OSError, so a corrupt record passes silently there.
        """
        if not isinstance(exc, ConnectionError):
            self._loop.call_exception_handler({
                "message": message, "exception": exc,
                "transport": self._transport, "protocol": self,
            })
        self._wake_waiter(exc)
        self._end(exc, abort=True)

    def _get_extra_info(self, name: str, default: Any) -> Any:
        if name in self._extra:
            return self._extra[name]
        if self._transport is not None:
            return self._transport.get_extra_info(name, default)
        return default


def _positive(value: float | None, default: float, name: str) -> float:
    """``value`` seconds, ``default`` if None; ValueError unless positive."""
    if value is None:
        return default
    if value <= 0:
        raise ValueError(f"{name} should be a positive number, got {value}")
    return value
