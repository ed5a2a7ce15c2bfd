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
from cpython.weakref cimport PyWeakref_NewRef
from libc.errno cimport errno, EAGAIN, EINTR, ECONNABORTED
from libc.string cimport memcpy
from libc.stdint cimport uint16_t, uint32_t

cdef extern from "<errno.h>" nogil:
    enum:
        EWOULDBLOCK

cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    struct sockaddr:
        unsigned short sa_family
    struct sockaddr_storage:
        unsigned short ss_family
    int getsockname(int fd, sockaddr* addr, socklen_t* length)
    int shutdown(int fd, int how)
    int c_close "close"(int fd)
    enum:
        AF_INET
        AF_INET6
        SHUT_WR

cdef extern from "<netinet/in.h>" nogil:
    struct in_addr:
        uint32_t s_addr
    struct in6_addr:
        unsigned char s6_addr[16]
    struct sockaddr_in:
        unsigned short sin_family
        uint16_t sin_port
        in_addr sin_addr
    struct sockaddr_in6:
        unsigned short sin6_family
        uint16_t sin6_port
        uint32_t sin6_flowinfo
        in6_addr sin6_addr
        uint32_t sin6_scope_id
    uint16_t ntohs(uint16_t value)
    uint32_t ntohl(uint32_t value)

cdef extern from "<arpa/inet.h>" nogil:
    const char* inet_ntop(int family, const void* source, char* destination, socklen_t size)
    enum:
        INET6_ADDRSTRLEN

cdef extern from *:
    """
    #include <fcntl.h>
    #include <unistd.h>
    /* accept(2) a connection as a non-blocking, close-on-exec descriptor:
       accept4 does both in the one system call where it exists (Linux, the
       BSDs); elsewhere (macOS) accept, then fcntl. */
    static int tinyloop_accept(int fd, struct sockaddr *address, socklen_t *length) {
    #if defined(SOCK_NONBLOCK) && defined(SOCK_CLOEXEC)
        return accept4(fd, address, length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    #else
        int conn = accept(fd, address, length);
        if (conn >= 0) {
            fcntl(conn, F_SETFD, FD_CLOEXEC);
            fcntl(conn, F_SETFL, fcntl(conn, F_GETFL) | O_NONBLOCK);
        }
        return conn;
    #endif
    }
    """
    int tinyloop_accept(int fd, sockaddr* address, socklen_t* length) nogil

import collections
import stat
import warnings

from tinyloop.aio.transports import DEFAULT_HIGH_WATER, FlowControlMixin
from tinyloop.aio import base_events as _aio_base_events
from tinyloop.aio import selector_events as _aio_selector_events

cdef object _BufferedProtocol = asyncio.BufferedProtocol
cdef object _OUT_OF_RESOURCES = _aio_selector_events._OUT_OF_RESOURCES
cdef object _INET = _aio_selector_events._INET
# An accepted connection's socket object, when one is asked for: its
# descriptor is non-blocking already (accept4), and a type with
# SOCK_NONBLOCK tells socket.socket so without another system call.
cdef int _SOCK_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)
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
    cdef uv.uv_tcp_t* _handle     # NULL once closed (or never opened)
    cdef object _sock             # the socket object; None until asked for, if accepted here
    cdef int _sock_fd
    cdef readonly object _protocol
    cdef object _data_received    # the protocol's bound method, looked up once
    cdef bint _buffered           # the protocol is an asyncio.BufferedProtocol
    cdef Py_buffer _user_buffer   # get_buffer()'s buffer between alloc and read
    cdef bint _has_user_buffer
    cdef dict _extra              # get_extra_info's table; None until asked for, if accepted here
    cdef sockaddr_in6 _peer       # an accepted connection's peer, from accept(2): fits IPv4 too
    cdef int _family              # an accepted connection's address family and protocol,
    cdef int _proto               # for the socket object made when one is asked for
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
        # A connection the loop did not accept itself (create_connection,
        # connect_accepted_socket, a Part III server's TLS path): the user's
        # socket object, and its extra info read at once, as Part III does.
        self._extra = _aio_selector_events._socket_extra(sock, extra)
        self._sock = sock
        _aio_selector_events._set_nodelay(sock)
        self._open(loop, sock.fileno(), protocol, waiter, server)

    cdef _open(self, UVLoop loop, int fd, protocol, waiter, server):
        # What every TCP transport does once it has a descriptor: a uv_tcp_t
        # on it, the registrations, and connection_made scheduled.
        cdef int err
        self._loop = loop
        self._context = PyContext_CopyCurrent()
        self._sock_fd = fd
        self._pending = []
        self._high_water = DEFAULT_HIGH_WATER
        self._low_water = DEFAULT_HIGH_WATER // 4
        self._set_protocol(protocol)

        self._handle = <uv.uv_tcp_t*>loop._alloc_handle(sizeof(TCPHandle))
        (<TCPHandle*>self._handle).recv_buffer = loop._recv_buffer
        (<TCPHandle*>self._handle).buffered = self._buffered
        uv.uv_tcp_init(loop.uvloop, self._handle)
        err = uv.uv_tcp_open(self._handle, fd)
        if err < 0:
            self._handle.data = NULL
            uv.uv_close(<uv.uv_handle_t*>self._handle, _on_tcp_close)
            self._handle = NULL
            raise _uv_error(err)
        self._handle.data = <void*>self

        self._server = server
        if server is not None:
            server._attach(self)
        # Which transport owns the descriptor, weakly (add_reader's check:
        # UVLoop._ensure_fd_no_transport); given back in _close_handle.
        loop._tcp_transports[fd] = PyWeakref_NewRef(self, None)
        loop._call_soon_c(self._protocol.connection_made, (self,))
        loop._call_soon_c(self._start_reading, ())   # after connection_made, which may pause us
        if waiter is not None:
            loop._call_soon_c(_set_result_unless_cancelled, (waiter, None))

    def __repr__(self):
        if self._handle is NULL:
            return "<TCPTransport closed>"
        state = "closing" if self._closing else "paused" if self._paused else "reading"
        return f"<TCPTransport fd={self._sock_fd} {state} buffered={self.get_write_buffer_size()}>"

    def __del__(self):
        if self._handle is not NULL:
            warnings.warn(f"unclosed transport {self!r}", ResourceWarning, source=self)

    def __dealloc__(self):
        # Collected unclosed: give the handle back to libuv, which closes
        # the descriptor; the socket object must not close it again.
        if self._handle is not NULL:
            if self._sock is not None:
                self._sock.detach()
            self._forget_fd()
            _close_handle(<uv.uv_handle_t*>self._handle)
            self._handle = NULL
        self._release_user_buffer()

    cdef _forget_fd(self):
        # The descriptor goes back to the kernel: no transport owns it now.
        if self._loop is not None and self._loop._tcp_transports is not None:
            self._loop._tcp_transports.pop(self._sock_fd, None)

    cdef _abandon(self):
        # The loop is closing with this transport open (UVLoop._close_uv):
        # libuv closes the handle; we drop our references and say so.
        warnings.warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
        self._forget_fd()
        self._handle = NULL
        if self._sock is not None:
            self._sock.detach()
            self._sock = None
        if self._reading:
            self._reading = False
            Py_DECREF(self)

    # -- asyncio.BaseTransport -------------------------------------------------------

    def get_extra_info(self, name, default=None):
        """``socket``, ``sockname``, ``peername``, or what the loop added; else ``default``.

        For a connection this loop accepted, the socket object and the local
        address are made when first asked for (uvloop does the same), and
        the peer's address comes from accept(2); asked for the first time
        after the transport has closed, ``socket`` and ``sockname`` are None.
        """
        if self._extra is None:
            if name == "peername":
                return _address(<sockaddr*>&self._peer)
            if name != "socket" and name != "sockname":
                return default   # an accepted connection has no other key
            self._extra = self._accepted_extra()
        return self._extra.get(name, default)

    cdef dict _accepted_extra(self):
        # The table Part III's accept makes ({"peername": address} and what
        # _socket_extra adds), made now that someone asks.
        cdef sockaddr_storage local
        cdef socklen_t length = sizeof(local)
        sockname = None
        if self._handle is not NULL and getsockname(self._sock_fd, <sockaddr*>&local, &length) == 0:
            sockname = _address(<sockaddr*>&local)
        return {"socket": self._socket(), "sockname": sockname,
                "peername": _address(<sockaddr*>&self._peer)}

    cdef object _socket(self):
        # The socket object; for an accepted connection made now, once, over
        # the descriptor libuv owns (detached at close, as the user's is).
        if self._sock is None and self._handle is not NULL:
            self._sock = socket.socket(self._family, socket.SOCK_STREAM | _SOCK_NONBLOCK,
                                       self._proto, self._sock_fd)
            if not _SOCK_NONBLOCK:
                self._sock.setblocking(False)
        return self._sock

    def is_closing(self):
        return self._closing

    def set_protocol(self, protocol):
        self._set_protocol(protocol)

    cdef _set_protocol(self, protocol):
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
            self._loop._call_soon_c(self._call_connection_lost, (None,))
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
        # Discussion: why copy each read out of the loop's buffer?  Reading
        # into a new bytes and shrinking it (socket.recv's way) was tried on
        # 2026-11-29, server CPU per 100 KiB echo message: with 256 KiB, 3.2x
        # the copy's (glibc serves a block that large with mmap(2), fresh
        # pages each time: M_MMAP_THRESHOLD, mallopt(3)); with just under
        # 128 KiB, from the heap, no less than the copy (47.1 against 45.5
        # µs, runs overlapping).  The copy stays: it is the simpler code.
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
        self._loop._check_sendfile_params(self.get_extra_info("socket"), file, offset, count)
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
                self._loop._call_soon_c(self._call_connection_lost, (None,))
        elif self._eof:
            self._shutdown()

    cdef _shutdown(self):
        # A failure means the peer is gone already: connection_lost will say so.
        if self._handle is not NULL:
            shutdown(self._sock_fd, SHUT_WR)

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
        self._loop._call_soon_c(self._call_connection_lost, (exc,))

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
        self._forget_fd()
        Py_INCREF(self)   # until _on_tcp_close
        uv.uv_close(<uv.uv_handle_t*>self._handle, _on_tcp_close)
        self._handle = NULL


# -- Addresses --------------------------------------------------------------------------

cdef object _address(const sockaddr* address):
    # An IPv4 or IPv6 address as the socket module gives it: (host, port),
    # or (host, port, flowinfo, scope_id); None for any other family.
    cdef char host[INET6_ADDRSTRLEN]
    cdef const sockaddr_in* ipv4
    cdef const sockaddr_in6* ipv6
    if address.sa_family == AF_INET:
        ipv4 = <const sockaddr_in*>address
        if inet_ntop(AF_INET, &ipv4.sin_addr, host, sizeof(host)) is NULL:
            return None
        return (host.decode("ascii"), ntohs(ipv4.sin_port))
    if address.sa_family == AF_INET6:
        ipv6 = <const sockaddr_in6*>address
        if inet_ntop(AF_INET6, &ipv6.sin6_addr, host, sizeof(host)) is NULL:
            return None
        return (host.decode("ascii"), ntohs(ipv6.sin6_port), ntohl(ipv6.sin6_flowinfo),
                ipv6.sin6_scope_id)
    return None


# -- Accepting connections ----------------------------------------------------------------
#
# Discussion: Part III accepts in Python: socket.accept() builds a socket
# object (its family and type read back as enums), the loop makes it
# non-blocking, builds the transport's extra-info table, and a second
# accept ends the turn by raising BlockingIOError.  Counted by callgrind,
# that path was the larger part of what uv spent more than uvloop on a
# connection per request (chapters/libuv.md).  Here the listener's
# readiness callback is a C object: accept4(2) returns a non-blocking
# descriptor and the peer's address at once, EAGAIN is a return value,
# and the transport is made in C around the bare descriptor; the socket
# object and the local address are made only if someone asks
# (TCPTransport.get_extra_info).  What the listener does is Part III's,
# rule for rule: up to ``backlog`` connections per readiness, a protocol
# factory that raises is reported and its connection closed, and out of
# descriptors the listener rests (Part III's _accept_back_off).  TLS
# listeners, and any socket that is not TCP, keep Part III's Python path.

@cython.final
cdef class _TCPListener:
    """The reader of one listening TCP socket of a Server (internal): accepts in C."""

    cdef UVLoop loop
    cdef object sock              # the listening socket (the Server's)
    cdef int fd
    cdef int family
    cdef int proto
    cdef object protocol_factory
    cdef object server
    cdef int backlog
    cdef tuple serving            # _start_serving's arguments: how Part III restarts us
    cdef bint resting             # made again after a rest that no accept has ended yet

    def __repr__(self):
        return f"<_TCPListener fd={self.fd}>"

    def __call__(self):
        cdef int i, conn, err
        cdef sockaddr_storage peer
        cdef socklen_t length
        for i in range(self.backlog):
            length = sizeof(peer)
            conn = tinyloop_accept(self.fd, <sockaddr*>&peer, &length)
            if conn < 0:
                err = errno
                if err == EINTR:
                    continue
                if err == EAGAIN or err == ECONNABORTED:
                    return   # the queue is empty, or a client gave up before we took it
                if err == EWOULDBLOCK:
                    return   # EAGAIN's other name, where it has one
                exc = OSError(err, os.strerror(err))   # the subclass socket.accept would raise
                if err not in _OUT_OF_RESOURCES:
                    raise exc   # reported with this handle by the loop's exception handler
                self.loop._accept_back_off(exc, *self.serving)
                return
            if self.resting:
                self.resting = False
                if self.loop._accept_backoff.pop(self.fd, None) is not None:
                    _aio_base_events.logger.info("accepting connections on %r again", self.sock)
            self._serve(conn, <sockaddr*>&peer, length)

    cdef _serve(self, int fd, const sockaddr* peer, socklen_t length):
        # Part III's _accept_plain, on a bare descriptor.
        cdef TCPTransport transport
        try:
            protocol = self.protocol_factory()
        except (SystemExit, KeyboardInterrupt):
            c_close(fd)
            raise
        except BaseException as exc:
            conn = socket.socket(self.family, socket.SOCK_STREAM, self.proto, fd)
            conn.close()
            self.loop.call_exception_handler({"message": "Error in protocol_factory() while accepting",
                                              "exception": exc, "socket": conn})
            return
        transport = TCPTransport.__new__(TCPTransport)
        transport._family = self.family
        transport._proto = self.proto
        memcpy(&transport._peer, peer, min(<size_t>length, sizeof(transport._peer)))
        try:
            transport._open(self.loop, fd, protocol, None, self.server)
        except BaseException:
            if transport._handle is NULL:
                c_close(fd)   # libuv never took it
            raise


# -- A server's clients ----------------------------------------------------------------------

@cython.final
cdef class ClientSet:
    """The client transports of a tinyloop.uv Server, held weakly (tinyloop/uv/loop.py's Server).

    What Part III's Server keeps in a weakref.WeakSet, in C: ``add`` and
    ``discard`` run once per connection and make no Python call, unless
    ``discard`` empties the set, which calls ``on_empty()``.  ``len()`` and
    iteration (over the transports still alive) are what close(),
    close_clients() and abort_clients() use.  Like WeakSet, it holds weak
    references whose callback drops them when a transport is collected, and
    finds a transport by a weak reference to it, which compares by referent.
    """

    cdef set _refs
    cdef object _on_empty
    cdef object _forget           # self._gone, bound once: every reference's callback

    def __cinit__(self, on_empty):
        self._refs = set()
        self._on_empty = on_empty
        self._forget = self._gone

    def add(self, transport):
        self._refs.add(PyWeakref_NewRef(transport, self._forget))

    def discard(self, transport):
        self._refs.discard(PyWeakref_NewRef(transport, None))
        if not self._refs:
            self._on_empty()

    def _gone(self, ref):
        self._refs.discard(ref)   # dead: found by itself (a dead reference equals only itself)

    def __len__(self):
        return len(self._refs)

    def __iter__(self):
        return iter([transport for transport in (ref() for ref in list(self._refs))
                     if transport is not None])
