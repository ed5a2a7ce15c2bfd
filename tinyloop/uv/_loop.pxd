# tinyloop/uv/_loop.pxd
#
# The C-level shape of the extension's classes: what _loop.pyx and the files
# it includes (handles.pyx, timers.pyx, poll.pyx, tcp.pyx) may touch of each
# other without a Python attribute lookup.  Read _loop.pyx first; this file
# only declares.

from libc.stdint cimport uint64_t
from tinyloop.uv cimport uv


cdef struct TimerEntry:
    # One slot of the timer heap, kept in C: the deadline (seconds, on
    # UVLoop.time()'s clock), a sequence number that breaks ties first
    # scheduled first, and the TimerHandle (a strong reference we own).
    double when
    uint64_t sequence
    void* timer


cdef struct CheckState:
    # What the check handle reads without taking the GIL: whether any I/O
    # callback ran in this iteration (else there is nothing for it to do),
    # and the loop it belongs to (a borrowed pointer).
    int io_ran           # how many I/O callbacks ran (0: none)
    void* loop
    bint instrumented    # an instrument is installed: report the wait and the phase


cdef class Handle:
    cdef readonly object _callback
    cdef readonly object _args
    cdef readonly object _context
    cdef readonly UVLoop _loop
    cdef readonly bint _cancelled
    cdef readonly object _source_traceback   # debug mode: where it was made (asyncio's)
    cdef object __weakref__

    cdef int _run_c(self) except -1
    cdef _report(self, BaseException exc)


cdef class TimerHandle(Handle):
    cdef readonly double _when
    cdef bint _in_heap


cdef class UVPoll:
    cdef uv.uv_poll_t* handle
    cdef UVLoop loop
    cdef int fd
    cdef int events          # UV_READABLE | UV_WRITABLE: what we asked for
    cdef Handle reader
    cdef Handle writer

    cdef int _update(self) except -1
    cdef _close(self)


cdef class UVLoop:
    cdef uv.uv_loop_t* uvloop
    cdef uv.uv_idle_t* _idle
    cdef uv.uv_check_t* _check
    cdef uv.uv_timer_t* _timer
    cdef uv.uv_async_t* _async
    cdef bint _idle_active
    cdef CheckState _check_state

    # Set by Part II's Loop.__init__ through these public descriptors, so the
    # Python code of Parts II and III and the C code here share one state.
    # Each is a field of the contract its layer offers (Part II's Reactor in
    # tinyloop/callbacks/loop.py, Part III's AioBase in aio/unix_events.py):
    # tests/test_contracts.py holds this list to them.
    cdef public object _ready          # the ready queue: a collections.deque
    cdef public bint _stopping
    cdef public bint _closed
    cdef public bint _debug
    cdef public object _instrument     # tinyloop.trace's InstrumentSet, or None
    cdef public object _task_factory   # set_task_factory's, or None (Part III's attribute)
    # The C-level test on the hot paths: True while _instrument is not None,
    # so a loop with no instrument makes no Python call to find out.
    cdef bint _instrumented
    cdef uv.uv_prepare_t* _prepare     # made at start: lends the GIL out for a wait, reports it
    cdef _sync_instrumented(self)

    cdef object _last_error            # KeyboardInterrupt/SystemExit from a callback

    # The timer heap (timers.pyx).
    cdef TimerEntry* _heap
    cdef Py_ssize_t _heap_len
    cdef Py_ssize_t _heap_capacity
    cdef uint64_t _timer_sequence
    cdef Py_ssize_t _timers_cancelled
    cdef double _armed_when

    # Readiness (poll.pyx): fd -> UVPoll.
    cdef dict _polls

    # Transports with writes queued in this turn, and the one buffer every
    # data_received read lands in before it is copied to bytes (tcp.pyx).
    cdef list _to_flush
    cdef char* _recv_buffer
    # fd -> a weak reference to the TCP transport that owns it (tcp.pyx):
    # what _ensure_fd_no_transport checks besides Part III's _transports.
    cdef dict _tcp_transports

    # libuv handles we have opened and not yet seen closed.
    cdef readonly Py_ssize_t _live_handles

    # Set in a fork child if uv_loop_fork failed: run_once raises it.
    cdef object _fork_error
    cdef _after_fork_in_child(self)

    cdef inline void _arm_idle(self) noexcept
    cdef Handle _call_soon_c(self, object callback, tuple args)
    cdef int _run_ready(self) except -1
    cdef _stash_error(self, BaseException exc)
    cdef int _flush_writes(self) except -1
    cdef void* _alloc_handle(self, size_t size) except NULL

    cdef TimerHandle _call_at(self, double when, object callback, tuple args, object context)
    cdef _push_timer(self, TimerHandle timer)
    cdef _arm_timer(self)
    cdef int _fire_timers(self) except -1
    cdef _clear_timers(self)
    cdef _compact_timers(self)
    cdef _timer_cancelled(self, TimerHandle timer)

    cdef UVPoll _poll_for(self, int fd)
    cdef _add_interest_c(self, fd, callback, tuple args, bint reading)
    cdef _remove_interest_c(self, fd, bint reading)
