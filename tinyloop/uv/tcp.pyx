# tinyloop/uv/tcp.pyx  (included by _loop.pyx)
#
# TCP transports on uv_tcp_t: asyncio.Transport's contract, with libuv
# reading and writing.
#
# Rules this file keeps:
#   * The contract is Part III's _SelectorSocketTransport's
#     (tinyloop/aio/selector_events.py), method for method: connection_made
#     and the first read come through the ready queue; data_received(bytes),
#     or get_buffer/buffer_updated for an asyncio.BufferedProtocol;
#     eof_received deciding a half-close; connection_lost exactly once.
#   * Reads: uv_read_start/uv_read_stop (stream.html) *are* resume_reading
#     and pause_reading.  libuv calls read until EAGAIN itself.
#   * Writes are batched per loop turn: write() appends to a list and puts
#     the transport on the loop's flush list; at the end of the turn (the
#     idle or check phase) _flush sends the whole list with one
#     uv_try_write (writev(2)), and hands what the kernel did not take to
#     uv_write, which libuv finishes when the socket is writable.
#   * The transport's memory outlives libuv's use of it: it holds a
#     reference to itself while libuv may call it back (between
#     uv_read_start and uv_read_stop, and between uv_close and the close
#     callback), and each write request holds one to the transport and to
#     its data.  Otherwise only its users keep it alive, so a transport
#     nobody closed and nobody holds is collected, with a ResourceWarning,
#     as Part III's is.
#   * The socket object stays the user's view (get_extra_info("socket")),
#     but libuv owns the descriptor once opened: at close the socket is
#     detached, and libuv's uv_close closes the descriptor, once.
#
# State (all of it):
#
#     _pending        list of bytes written this turn, not yet handed to libuv
#     _pending_size   bytes in _pending
#     _queued         on the loop's flush list this turn
#     _reading        uv_read_start is in effect
#     _closing        close() or abort() was called: read no more
#     _eof            write_eof() was called: shut down once everything is sent
#     _conn_lost      connection_lost is scheduled (then counts late writes)
#     _protocol_paused  pause_writing() was called and resume_writing() not yet
#
# Discussion: why batch?  A Protocol that answers each request in
# data_received writes once per request; with 24 requests pipelined in one
# read that is 24 send(2) calls on Part III's transport, and one writev(2)
# here.  Japronto's write-up puts its speed down to the same move; zuvloop
# batches writes per turn too.  The price is latency within the turn: a
# write waits until the callbacks of the current phase are done.

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_SIMPLE

import collections
import stat
import warnings

from tinyloop.aio.transports import DEFAULT_HIGH_WATER, FlowControlMixin
from tinyloop.aio import base_events as _aio_base_events
from tinyloop.aio import selector_events as _aio_selector_events

cdef object _BufferedProtocol = asyncio.BufferedProtocol
cdef object _set_result_unless_cancelled = _aio_base_events._set_result_unless_cancelled
cdef object _FlowControlWaiter = _aio_base_events._FlowControlWaiter

cdef enum:
    READ_BUFFER_SIZE = 256 * 1024   # bytes: one read, as Part III's max_size
    IOV_MAX_BATCH = 1024            # buffers per writev(2): IOV_MAX on Linux
    LOG_THRESHOLD_FOR_CONNLOST_WRITES = 5


@cython.final
@cython.freelist(64)
cdef class _WriteRequest:
    # One uv_write in flight: the request libuv fills, and the bytes it
    # points into, kept alive until the write callback.
    cdef uv.uv_write_t req
    cdef object data          # a list of bytes objects
    cdef TCPTransport transport


cdef void _on_write(uv.uv_write_t* req, int status) noexcept nogil:
    _hold_gil()   # the first callback after a wait takes the GIL back (_loop.pyx)
    _on_write_held(req, status)


cdef void _on_write_held(uv.uv_write_t* req, int status) noexcept with gil:
    cdef _WriteRequest request = <_WriteRequest>req.data
    Py_DECREF(request)         # libuv's reference, taken in _flush
    cdef TCPTransport transport = request.transport
    transport._loop._check_state.io_ran += 1
    request.transport = None
    request.data = None
    try:
        PyContext_Enter(transport._context)
        try:
            transport._on_written(status)
        finally:
            PyContext_Exit(transport._context)
    except BaseException as exc:
        transport._loop._stash_error(exc)


cdef struct TCPHandle:
    # The uv_tcp_t (first: a pointer to one is a pointer to the other) and
    # what the allocation callback needs without the GIL.
    uv.uv_tcp_t tcp
    char* recv_buffer   # the loop's read buffer
    bint buffered       # the protocol is a BufferedProtocol: its get_buffer() is Python


cdef void _on_alloc(uv.uv_handle_t* handle, size_t suggested, uv.uv_buf_t* buf) noexcept nogil:
    # Called before every read.  A plain Protocol reads into the loop's one
    # buffer: no Python call, so the GIL is not taken here (the read
    # callback that follows takes it once).
    cdef TCPHandle* tcp = <TCPHandle*>handle
    if not tcp.buffered:
        buf.base = tcp.recv_buffer
        buf.len = READ_BUFFER_SIZE
        return
    _hold_gil()
    with gil:
        _alloc_user_buffer(handle, buf)


cdef void _alloc_user_buffer(uv.uv_handle_t* handle, uv.uv_buf_t* buf) noexcept:
    cdef TCPTransport transport = <TCPTransport>handle.data
    try:
        PyContext_Enter(transport._context)
        try:
            transport._alloc(buf)
        finally:
            PyContext_Exit(transport._context)
    except BaseException as exc:
        buf.base = NULL
        buf.len = 0
        transport._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")


cdef void _on_read(uv.uv_stream_t* stream, ssize_t nread, const uv.uv_buf_t* buf) noexcept nogil:
    _hold_gil()   # the first callback after a wait takes the GIL back for the rest
    _on_read_held(stream, nread, buf)


cdef void _on_read_held(uv.uv_stream_t* stream, ssize_t nread, const uv.uv_buf_t* buf) noexcept with gil:
    if stream.data is NULL:
        return
    cdef TCPTransport transport = <TCPTransport>stream.data
    transport._loop._check_state.io_ran += 1
    try:
        PyContext_Enter(transport._context)
        try:
            if transport._loop._instrumented:
                _read_observed(transport, nread, buf)
            else:
                transport._on_read(nread, buf)
        finally:
            PyContext_Exit(transport._context)
    except BaseException as exc:
        transport._loop._stash_error(exc)


cdef _read_observed(TCPTransport transport, ssize_t nread, const uv.uv_buf_t* buf):
    # tinyloop.trace: the read is a callback of the poll phase, named by the
    # protocol method it calls, and one recv(2) of nread bytes (0 at EOF).
    if nread == 0:
        transport._on_read(nread, buf)   # EAGAIN: nothing read, nothing to report
        return
    instrument = transport._loop._instrument
    protocol = transport._protocol
    callback = protocol.buffer_updated if transport._has_user_buffer else protocol.data_received
    instrument.before_callback(callback)
    try:
        if nread > 0 or nread == uv.UV_EOF:
            instrument.transport_read(transport, nread if nread > 0 else 0, 1)
        transport._on_read(nread, buf)
    finally:
        instrument.after_callback(callback)


cdef void _on_tcp_close(uv.uv_handle_t* handle) noexcept with gil:
    # The end of the handle's life: free it, and drop the transport's
    # reference to itself (taken in _close_handle).
    cdef void* owner = handle.data
    (<Py_ssize_t*>handle.loop.data)[0] -= 1
    PyMem_RawFree(handle)
    if owner is not NULL:
        Py_DECREF(<object>owner)


@cython.final
cdef class TCPTransport:
    """A TCP connection's transport (``asyncio.Transport``) on libuv's uv_tcp_t.

    Made by the loop for every TCP connection (create_connection,
    create_server, connect_accepted_socket); see
    https://docs.python.org/3/library/asyncio-protocol.html#transports.
    Unix-socket connections keep Part III's transport on uv_poll.
    """

    cdef readonly UVLoop _loop
    cdef uv.uv_tcp_t* _handle
    cdef object _sock
    cdef int _sock_fd
    cdef readonly object _protocol
    cdef object _data_received    # the protocol's bound method, looked up once
    cdef bint _buffered           # the protocol is an asyncio.BufferedProtocol
    cdef Py_buffer _user_buffer   # get_buffer()'s buffer between alloc and read
    cdef bint _has_user_buffer
    cdef dict _extra
    cdef object _server
    cdef object _waiter
    cdef list _pending
    cdef Py_ssize_t _pending_size
    cdef bint _queued
    cdef bint _reading            # uv_read_start is in effect (and we hold a reference)
    cdef bint _paused
    cdef bint _closing
    cdef bint _eof
    cdef int _conn_lost
    # Public to Python: Part III's FlowControlMixin methods, shared below,
    # read and set them by name.
    cdef public bint _protocol_paused
    cdef public Py_ssize_t _high_water
    cdef public Py_ssize_t _low_water
    # The contextvars context the protocol's callbacks run in: a copy of
    # the one the transport was made in, as asyncio's reader handle keeps.
    cdef object _context
    cdef bint _sendfile_active    # loop.sendfile is sending: write() refuses
    cdef bint _sendfile_writing   # ...except sendfile's own writes
    cdef object __weakref__

    _start_tls_compatible = True

    def __init__(self, UVLoop loop, sock, protocol, waiter=None, extra=None, server=None):
        cdef int err
        self._loop = loop
        self._context = PyContext_CopyCurrent()
        self._extra = _aio_selector_events._socket_extra(sock, extra)
        self._sock = sock
        self._sock_fd = sock.fileno()
        self._pending = []
        self._high_water = DEFAULT_HIGH_WATER
        self._low_water = DEFAULT_HIGH_WATER // 4
        self.set_protocol(protocol)
        _aio_selector_events._set_nodelay(sock)

        self._handle = <uv.uv_tcp_t*>loop._alloc_handle(sizeof(TCPHandle))
        (<TCPHandle*>self._handle).recv_buffer = loop._recv_buffer
        (<TCPHandle*>self._handle).buffered = self._buffered
        uv.uv_tcp_init(loop.uvloop, self._handle)
        err = uv.uv_tcp_open(self._handle, self._sock_fd)
        if err < 0:
            self._handle.data = NULL
            uv.uv_close(<uv.uv_handle_t*>self._handle, _on_tcp_close)
            self._handle = NULL
            raise _uv_error(err)
        self._handle.data = <void*>self

        self._server = server
        if server is not None:
            server._attach(self)
        loop._transports[self._sock_fd] = self
        loop.call_soon(self._protocol.connection_made, self)
        loop.call_soon(self._start_reading)   # after connection_made, which may pause us
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self):
        if self._sock is None:
            return "<TCPTransport closed>"
        state = "closing" if self._closing else "paused" if self._paused else "reading"
        return f"<TCPTransport fd={self._sock_fd} {state} buffered={self.get_write_buffer_size()}>"

    def __del__(self):
        if self._sock is not None:
            warnings.warn(f"unclosed transport {self!r}", ResourceWarning, source=self)

    def __dealloc__(self):
        # Collected unclosed: give the handle back to libuv, which closes
        # the descriptor; the socket object must not close it again.
        if self._handle is not NULL:
            if self._sock is not None:
                self._sock.detach()
            _close_handle(<uv.uv_handle_t*>self._handle)
            self._handle = NULL
        self._release_user_buffer()

    cdef _abandon(self):
        # The loop is closing with this transport open (UVLoop._close_uv):
        # libuv closes the handle; we drop our references and say so.
        warnings.warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
        self._handle = NULL
        if self._sock is not None:
            self._sock.detach()
            self._sock = None
        if self._reading:
            self._reading = False
            Py_DECREF(self)

    # -- asyncio.BaseTransport -------------------------------------------------------

    def get_extra_info(self, name, default=None):
        """``socket``, ``sockname``, ``peername``, or what the loop added; else ``default``."""
        return self._extra.get(name, default)

    def is_closing(self):
        return self._closing

    def set_protocol(self, protocol):
        self._protocol = protocol
        self._buffered = isinstance(protocol, _BufferedProtocol)
        if self._handle is not NULL:
            (<TCPHandle*>self._handle).buffered = self._buffered
        self._data_received = None if self._buffered else protocol.data_received

    def get_protocol(self):
        return self._protocol

    def close(self):
        """Read no more; send what is buffered, then close and call connection_lost(None)."""
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        self._flush()
        if self._conn_lost == 0 and not self._buffer_size():
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)
        # else _on_written finishes the close when the last write is done.

    def abort(self):
        """Close now, dropping whatever is buffered; connection_lost(None) follows."""
        self._force_close(None)

    # -- asyncio.ReadTransport ---------------------------------------------------------

    def is_reading(self):
        return not self._paused and not self._closing

    def pause_reading(self):
        """Stop calling the protocol with data (uv_read_stop) until resume_reading()."""
        if not self.is_reading():
            return
        self._paused = True
        self._stop_reading()

    def resume_reading(self):
        """Start reading again (uv_read_start); idempotent."""
        if self._closing or not self._paused:
            return
        self._paused = False
        self._start_reading()

    def _start_reading(self):
        cdef int err
        if self._reading or not self.is_reading() or self._handle is NULL:
            return
        err = uv.uv_read_start(<uv.uv_stream_t*>self._handle, _on_alloc, _on_read)
        if err < 0:
            self._fatal_error(_uv_error(err), "Fatal read error on socket transport")
            return
        self._reading = True
        Py_INCREF(self)   # libuv may call us now: dropped in _stop_reading

    cdef _stop_reading(self):
        if self._reading:
            uv.uv_read_stop(<uv.uv_stream_t*>self._handle)
            self._reading = False
            Py_DECREF(self)   # the caller still holds one: self is alive on return

    cdef _alloc(self, uv.uv_buf_t* buf):
        # Where libuv reads into: the loop's one buffer, or the protocol's.
        cdef object user
        if not self._buffered:
            buf.base = self._loop._recv_buffer
            buf.len = READ_BUFFER_SIZE
            return
        user = self._protocol.get_buffer(-1)
        PyObject_GetBuffer(user, &self._user_buffer, PyBUF_WRITABLE)
        self._has_user_buffer = True
        if self._user_buffer.len == 0:
            self._release_user_buffer()
            raise RuntimeError("get_buffer() returned an empty buffer")
        buf.base = <char*>self._user_buffer.buf
        buf.len = self._user_buffer.len

    cdef _release_user_buffer(self):
        if self._has_user_buffer:
            PyBuffer_Release(&self._user_buffer)
            self._has_user_buffer = False

    cdef _on_read(self, ssize_t nread, const uv.uv_buf_t* buf):
        cdef bint buffered = self._has_user_buffer
        self._release_user_buffer()
        if self._conn_lost:
            return
        if nread > 0:
            try:
                if buffered:
                    self._protocol.buffer_updated(nread)
                else:
                    self._data_received(PyBytes_FromStringAndSize(buf.base, nread))
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                what = "buffer_updated" if buffered else "data_received"
                self._fatal_error(exc, f"Fatal error: protocol.{what}() call failed.")
        elif nread == uv.UV_EOF:
            self._on_eof()
        elif nread < 0:
            self._fatal_error(_uv_error(<int>nread), "Fatal read error on socket transport")
        # nread == 0: EAGAIN, nothing to do (stream.html)

    cdef _on_eof(self):
        # The peer shut down its side.  eof_received() returning true keeps
        # ours open for writing (a half-close); otherwise we close.
        self._stop_reading()
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if not keep_open:
            self.close()

    # -- asyncio.WriteTransport ----------------------------------------------------------

    def write(self, data):
        """Queue ``data`` (bytes-like) for this turn's write; never blocks.

        Raises TypeError for a non-bytes-like, RuntimeError after write_eof().
        """
        if type(data) is not bytes:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError("data argument must be a bytes-like object, "
                                f"not {type(data).__name__!r}")
            data = bytes(data)   # the caller may reuse a mutable buffer
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._sendfile_active and not self._sendfile_writing:
            raise RuntimeError("unable to write; sendfile is in progress")   # asyncio's words
        if not data:
            return
        if self._conn_lost:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                _aio_base_events.logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        # exercise uv-write-batch: begin
        self._pending.append(data)
        self._pending_size += PyBytes_GET_SIZE(data)
        if self._pending_size > self._high_water:
            # Enough to fill a batch: send now rather than pause the
            # protocol for bytes the kernel would have taken at once.
            self._flush()
        elif not self._queued:
            self._queued = True
            self._loop._to_flush.append(self)
        self._check_pause()
        # exercise uv-write-batch: end

    def writelines(self, list_of_data):
        """write() each bytes-like in the iterable; they go out in one writev."""
        for data in list_of_data:
            self.write(data)

    def write_eof(self):
        """Shut down the sending side (a FIN) once everything is sent; reading goes on."""
        if self._closing or self._eof:
            return
        self._eof = True
        self._flush()
        if not self._buffer_size():
            self._shutdown()

    def can_write_eof(self):
        return True

    async def _sendfile_native(self, file, offset, count):
        """loop.sendfile's path for this transport (Part III's loop.sendfile asks for it).

        Sends ``count`` bytes of ``file`` (all if None) from ``offset``;
        returns the bytes sent.  Meanwhile reading is paused and write()
        raises RuntimeError, as on asyncio's socket transports.  Raises
        ConnectionError if the peer goes.

        Discussion: asyncio sends with sendfile(2) once the buffer is empty,
        waiting for writability with a reader on the socket.  Here libuv's
        uv_tcp_t watches that descriptor, and libuv allows one watcher per
        descriptor, so the file's bytes go through this transport's own
        writes (read in the executor, Part III's _copy_file), under its flow
        control.  Not zero-copy, but the same contract: in order, whole,
        and nobody else's write in the middle.
        """
        self._loop._check_sendfile_params(self._sock, file, offset, count)
        # What asyncio's native path takes, and only that: a regular file
        # (anything else is the fallback's, and fallback=False refuses it).
        try:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise asyncio.SendfileNotAvailableError("not a regular file")
        except (AttributeError, OSError, ValueError) as exc:
            raise asyncio.SendfileNotAvailableError("not a regular file") from exc
        waiter = _FlowControlWaiter(self)   # pauses reading; turns pause_writing into a future
        self._sendfile_active = True

        async def send(data):
            await waiter.drain()
            self._sendfile_writing = True
            try:
                self.write(data)
            finally:
                self._sendfile_writing = False

        try:
            sent = await self._loop._copy_file(file, offset, count, send)
            await waiter.drain()
            return sent
        finally:
            self._sendfile_active = False
            waiter.restore()

    def get_write_buffer_size(self):
        """Bytes not yet taken by the kernel: queued this turn plus libuv's write queue."""
        return self._buffer_size()

    # Flow control: Part III's high- and low-water marks, by import.  The
    # mixin's methods only read and set the attributes above, so they work
    # on this C class as they do on Part III's transports; only the test
    # "has the buffer crossed a mark?", made on every write, is in C.
    get_write_buffer_limits = FlowControlMixin.get_write_buffer_limits
    _set_write_buffer_limits = FlowControlMixin._set_write_buffer_limits
    set_write_buffer_limits = FlowControlMixin.set_write_buffer_limits
    _maybe_pause_protocol = FlowControlMixin._maybe_pause_protocol
    _maybe_resume_protocol = FlowControlMixin._maybe_resume_protocol

    cdef Py_ssize_t _buffer_size(self):
        cdef Py_ssize_t size = self._pending_size
        if self._handle is not NULL:
            size += uv.uv_stream_get_write_queue_size(<uv.uv_stream_t*>self._handle)
        return size

    cdef _check_pause(self):
        if not self._protocol_paused and self._buffer_size() > self._high_water:
            self._maybe_pause_protocol()

    cdef _check_resume(self):
        if self._protocol_paused and self._buffer_size() <= self._low_water:
            self._maybe_resume_protocol()

    cdef _flush(self):
        # Send this turn's writes: one uv_try_write of them all, then a
        # uv_write of whatever the kernel did not take.
        cdef list pending = self._pending
        cdef Py_ssize_t n = len(pending), i, written, total = self._pending_size
        cdef uv.uv_buf_t small[16]
        cdef uv.uv_buf_t* bufs = small
        cdef _WriteRequest request
        cdef int err
        # exercise uv-write-batch: begin
        if not n or self._conn_lost or self._handle is NULL:
            return
        if n > IOV_MAX_BATCH:
            pending = [b"".join(pending)]
            n = 1
        self._pending = []
        self._pending_size = 0
        if n > 16:
            bufs = <uv.uv_buf_t*>PyMem_RawMalloc(n * sizeof(uv.uv_buf_t))
            if bufs is NULL:
                raise MemoryError()
        try:
            for i in range(n):
                bufs[i].base = PyBytes_AS_STRING(pending[i])
                bufs[i].len = PyBytes_GET_SIZE(pending[i])
            written = uv.uv_try_write(<uv.uv_stream_t*>self._handle, bufs, <unsigned int>n)
            if written == total:
                self._on_written(0)   # all taken: resume the protocol, finish a close
                return
            if written == uv.UV_EAGAIN:
                written = 0
            elif written < 0:
                self._fatal_error(_uv_error(<int>written), "Fatal write error on socket transport")
                return
            # Skip what went out; the rest goes to uv_write, which keeps
            # pointers into these bytes objects: the request holds them.
            i = 0
            while written >= <Py_ssize_t>bufs[i].len:
                written -= bufs[i].len
                i += 1
            bufs[i].base += written
            bufs[i].len -= written
            request = _WriteRequest.__new__(_WriteRequest)
            request.data = pending
            request.transport = self
            request.req.data = <void*>request
            err = uv.uv_write(&request.req, <uv.uv_stream_t*>self._handle, bufs + i,
                              <unsigned int>(n - i), _on_write)
            if err < 0:
                self._fatal_error(_uv_error(err), "Fatal write error on socket transport")
                return
            Py_INCREF(request)   # libuv's reference: dropped in _on_write
        finally:
            if bufs is not small:
                PyMem_RawFree(bufs)
        # exercise uv-write-batch: end

    cdef _on_written(self, int status):
        # The kernel took a batch: a uv_write finished (status 0), or
        # uv_try_write took it all; or a uv_write failed, or was cancelled
        # by close.
        if status < 0:
            if status != uv.UV_ECANCELED and not self._conn_lost:
                self._fatal_error(_uv_error(status), "Fatal write error on socket transport")
            return
        self._check_resume()
        if self._buffer_size():
            return
        if self._closing:
            if not self._conn_lost:
                self._conn_lost += 1
                self._loop.call_soon(self._call_connection_lost, None)
        elif self._eof:
            self._shutdown()

    cdef _shutdown(self):
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass   # the peer is gone already: connection_lost will say so

    # -- Closing ------------------------------------------------------------------------

    def _fatal_error(self, exc, message):
        # A reset or broken pipe is the peer's ordinary way of leaving.
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            if self._loop._debug:
                _aio_base_events.logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler({"message": message, "exception": exc,
                                               "transport": self, "protocol": self._protocol})
        self._force_close(exc)

    def _force_close(self, exc):
        if self._conn_lost:
            return
        self._pending = []
        self._pending_size = 0
        self._closing = True
        self._stop_reading()
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            if self._protocol is not None:
                self._protocol.connection_lost(exc)
        finally:
            self._close_handle()
            self._protocol = None
            self._data_received = None
            server, self._server = self._server, None
            if server is not None:
                server._detach(self)

    cdef _close_handle(self):
        # libuv owns the descriptor from uv_tcp_open on: detach the Python
        # socket (so it will not close the number again), then uv_close
        # closes the descriptor and, one iteration later, calls
        # _on_tcp_close, which frees the handle.
        if self._handle is NULL:
            return
        self._stop_reading()
        if self._sock is not None:
            self._sock.detach()
            self._sock = None
        Py_INCREF(self)   # until _on_tcp_close
        uv.uv_close(<uv.uv_handle_t*>self._handle, _on_tcp_close)
        self._handle = NULL
