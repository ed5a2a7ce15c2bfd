# tinyloop/uv/poll.pyx  (included by _loop.pyx)
#
# Readiness for add_reader/add_writer: one uv_poll_t per file descriptor.
#
# Rules this file keeps:
#   * One UVPoll per descriptor, holding its reader and writer handles, as
#     Part II's selector registration held (reader, writer) in its data
#     slot.  Adding or removing interest restarts the uv_poll with the new
#     event mask (one epoll_ctl, as Part II's modify).
#   * When no interest is left the uv_poll_t is stopped and closed at once:
#     the descriptor may be closed by its owner right after remove_reader,
#     and its number reused, and libuv must not be watching it then
#     (poll.html: "the user should not close a file descriptor while it is
#     being polled by an active poll handle").
#   * The callback runs the handles directly, in the poll phase of the
#     iteration, as uvloop does: no trip through the ready queue.
#
# Discussion: readiness from uv_poll is level-triggered, like Part II's
# selector: libuv asks epoll for EPOLLIN/EPOLLOUT without EPOLLET, so a
# reader that leaves data unread is called again next iteration.  Part III's
# socket transports, sock_* coroutines, pipes, the self-pipe and the
# subprocess watchers all sit on this file unchanged; only TCP connections
# move to uv_tcp (tcp.pyx).


cdef extern from "Python.h":
    # Runs the Python handlers of the signals that arrived (signal module).
    int PyErr_CheckSignals() except -1


cdef void _on_poll(uv.uv_poll_t* handle, int status, int events) noexcept nogil:
    _hold_gil()   # the first callback after a wait takes the GIL back (_loop.pyx)
    _on_poll_held(handle, status, events)


cdef void _on_poll_held(uv.uv_poll_t* handle, int status, int events) noexcept with gil:
    cdef UVPoll poll = <UVPoll>handle.data
    cdef Handle reader, writer
    poll.loop._check_state.io_ran += 1   # a count: tinyloop.trace reports it
    try:
        # Discussion: a signal that arrives while libuv waits wakes it
        # through the self-pipe, whose reader is one of these callbacks.
        # Python runs the signal's handler at the first bytecode after that,
        # inside a handle, which would report what it raises to the
        # exception handler and go on.  asyncio's select() runs the handler
        # itself and lets its exception out of run_until_complete; so we run
        # it here, before any handle, and stop the loop with what it raised.
        PyErr_CheckSignals()
        if status < 0:
            # An error on the descriptor (e.g. EBADF): wake both sides, as
            # epoll's EPOLLERR does; their next system call reports it.
            events = poll.events
        if events & (uv.UV_READABLE | uv.UV_DISCONNECT):
            reader = poll.reader
            if reader is not None and not reader._cancelled:
                if poll.loop._instrumented:
                    poll.loop._run_handle(reader)   # Part II's: calls the instruments
                else:
                    reader._run_c()
        if events & uv.UV_WRITABLE:
            # The reader may have removed the writer (or closed the poll).
            writer = poll.writer
            if writer is not None and not writer._cancelled:
                if poll.loop._instrumented:
                    poll.loop._run_handle(writer)
                else:
                    writer._run_c()
    except BaseException as exc:
        poll.loop._stash_error(exc)


cdef void _on_close_free(uv.uv_handle_t* handle) noexcept nogil:
    # Every handle we close ends here: libuv is done with the memory.  The
    # loop's data is its live-handle count (see UVLoop.__cinit__).
    (<Py_ssize_t*>handle.loop.data)[0] -= 1
    PyMem_RawFree(handle)


@cython.final
cdef class UVPoll:
    """The readiness registration of one descriptor (internal)."""

    def __repr__(self):
        return f"<UVPoll fd={self.fd} events={self.events}>"

    cdef int _update(self) except -1:
        # Ask libuv for the events our handles want; stop and close when none.
        cdef int events = 0
        cdef int err
        if self.reader is not None:
            events |= uv.UV_READABLE
        if self.writer is not None:
            events |= uv.UV_WRITABLE
        if events == self.events:
            return 0
        if not events:
            self._close()
            return 0
        err = uv.uv_poll_start(self.handle, events, _on_poll)
        if err < 0:
            raise _uv_error(err)
        self.events = events
        return 0

    cdef _close(self):
        if self.handle is NULL:
            return
        self.loop._polls.pop(self.fd, None)
        uv.uv_poll_stop(self.handle)
        _close_handle(<uv.uv_handle_t*>self.handle)
        self.handle = NULL
        self.events = 0
