# cython: language_level=3
# tinyloop/uv/_loop.pyx
#
# Part IV: the hot paths of tinyloop.aio's loop, moved into C on libuv.
# UVLoop is the C base of tinyloop.uv.Loop (tinyloop/uv/loop.py), which
# also inherits Part III's Python loop: every method defined here replaces
# the Python one of the same name, and every method not defined here is
# Part III's, unchanged.
#
# Rules this file keeps:
#   * The Python face stays Part III's (asyncio.AbstractEventLoop); this
#     file only changes how the work is done.  The same conformance suite
#     runs on both loops.
#   * libuv owns the iteration: run_once hands the thread to uv_run, which
#     returns when stop() calls uv_stop.  The
#     ready queue runs from an idle handle, which also keeps the loop from
#     blocking while callbacks wait; a check handle sends the writes a turn
#     queued (tcp.pyx) and arms the idle handle for what I/O callbacks queued.
#   * A libuv handle's memory is ours until its close callback: we malloc
#     it, uv_close it, and free it only in _on_close_free.  _live_handles
#     counts the handles between the two, and a debug build checks at
#     close() that none is left.
#   * No callback runs after its handle is closed: every callback checks
#     its object's state first, and uv_close stops the handle's callbacks.
#   * An exception libuv cannot carry (KeyboardInterrupt, SystemExit out of
#     a callback) is stashed, the loop stopped with uv_stop, and the
#     exception raised again from run_once once uv_run has returned.
#
# The files included below each hold one concern: handles.pyx (Handle,
# TimerHandle), timers.pyx (the C timer heap), poll.pyx (uv_poll readiness),
# tcp.pyx (TCP transports on uv_tcp), spawn.pyx (subprocesses by uv_spawn).

cimport cython
from cpython.mem cimport PyMem_RawMalloc, PyMem_RawFree, PyMem_RawRealloc
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdint cimport uint64_t
from libc.stdlib cimport free
from libc.string cimport memset

cdef extern from "stdlib.h":
    int posix_memalign(void** memptr, size_t alignment, size_t size) nogil

from tinyloop.uv cimport uv

import asyncio
import os
import signal
import socket
import sys
import threading
import weakref

from tinyloop.callbacks.loop import MAXIMUM_SELECT_TIMEOUT as _MAXIMUM_WAIT
from tinyloop.trace import instrument as _instruments

cdef object _MAIN_THREAD = threading.main_thread().ident
cdef object _Task = asyncio.Task   # asyncio's C Task (_asyncio.Task) where CPython has it
from tinyloop.aio.base_events import BaseEventLoop as _AioLoop
cdef object _aio_create_task = _AioLoop.create_task   # Part III's, for a task factory
cdef object _aio_create_future = _AioLoop.create_future   # Part III's, in debug mode
# The longest one uv_timer_t is armed for, in seconds: Part II's cap on one
# wait (a day), for the reason given in _arm_timer.
cdef double MAXIMUM_SELECT_TIMEOUT = _MAXIMUM_WAIT

# A debug build (TINYLOOP_UV_DEBUG=1 at build time, see setup.py) defines
# TINYLOOP_UV_DEBUG to 1; the C compiler drops the checks it guards from a
# release build.
cdef extern from *:
    """
    #ifndef TINYLOOP_UV_DEBUG
    #define TINYLOOP_UV_DEBUG 0
    #endif
    """
    const bint UV_DEBUG "TINYLOOP_UV_DEBUG"

DEBUG_BUILD = UV_DEBUG


cdef inline double _now() noexcept nogil:
    # The loop's clock, in seconds: uv_hrtime() is CLOCK_MONOTONIC in ns.
    return uv.uv_hrtime() * 1e-9


cdef _uv_error(int err):
    # libuv returns -errno on Unix: make the OSError subclass Python would.
    return OSError(-err, uv.uv_strerror(err).decode())


# Discussion: the GIL.  run_once keeps the GIL while libuv runs the
# callbacks and gives it away for the wait only: _on_prepare releases it
# just before libuv polls, and the first callback
# after the wait takes it back (_hold_gil).  Releasing it for the whole of
# uv_run made every callback take it and give it back: counted by callgrind,
# about 840 of the 3,362 instructions of a 1 KiB echo message
# (PyGILState_Ensure/Release, take_gil/drop_gil and their two mutexes);
# lent out per wait, the message costs 3,032.
# A callback still declared ``with gil`` stays correct: PyGILState_Ensure
# takes the GIL if the wait gave it away, and Release gives it back.
cdef extern from "Python.h":
    ctypedef struct PyThreadState:
        pass
    PyThreadState* PyEval_SaveThread() nogil
    void PyEval_RestoreThread(PyThreadState* state) nogil

cdef extern from *:
    """
    /* This thread's state while the poll phase waits without the GIL (NULL:
       the GIL is held), and whether run_once is inside uv_run here. */
    static __thread PyThreadState *tinyloop_wait_state = NULL;
    static __thread int tinyloop_in_run = 0;
    """
    PyThreadState* tinyloop_wait_state
    int tinyloop_in_run


cdef inline void _hold_gil() noexcept nogil:
    # Take the GIL back if the wait gave it away; nothing if it is held.
    global tinyloop_wait_state
    cdef PyThreadState* state = tinyloop_wait_state
    if state is not NULL:
        tinyloop_wait_state = NULL
        PyEval_RestoreThread(state)


include "handles.pyx"
include "timers.pyx"
include "poll.pyx"
include "tcp.pyx"
include "spawn.pyx"


# -- fork(2) ---------------------------------------------------------------------------
#
# Discussion: a child made by fork(2) gets a copy of every loop, but not of
# the kernel objects under it: the epoll instance, libuv's wake-up eventfd
# and Part II's self-pipe are the parent's, shared.  A child that polled
# them would take the parent's events; one that stopped watching a
# descriptor (uv_poll_stop is an EPOLL_CTL_DEL, at once) would take it out
# of the parent's epoll, and the parent would wait for it for ever.  libuv's
# rule (uv_loop_fork, loop.html) is to re-make that state in a child that
# goes on using the loop.  We do it for every open loop, at once, from the
# at-fork hook (before the child can make any call), as asyncio clears its
# running-loop state there: then using, closing or dropping the loop in the
# child touches nothing of the parent's.  And what else a child inherits
# and must not keep as it is:
#   * uv_async_send sends nothing while the handle's pending flag is set,
#     and fork may copy it set (a thread was sending, or the parent had not
#     yet seen the wake-up): we clear it, or no thread could wake the child;
#   * the self-pipe (signals' wake-up fd): a new socket pair takes the old
#     descriptor numbers (dup2), so the wake-up fd and the uv_poll on it
#     stay valid and are now the child's own;
#   * the main thread may be another (fork from a thread): run_once then
#     sets the signal wake-up fd in the child's, whose handlers it runs;
#   * the default executor's threads did not survive the fork, and a pool
#     that believes it has idle workers would queue work nobody runs: the
#     child gets a new pool when it next asks for one.
cdef object _live_loops = weakref.WeakSet()


def _after_fork_in_child():
    # The thread that forked is the child's main thread, the one Python
    # runs signal handlers in (uvloop's issue 452, the same mistake).
    global _MAIN_THREAD
    _MAIN_THREAD = threading.get_ident()
    for loop in list(_live_loops):
        (<UVLoop>loop)._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- The phases' callbacks -------------------------------------------------------------

cdef void _on_idle(uv.uv_idle_t* handle) noexcept with gil:
    cdef UVLoop loop = <UVLoop>handle.data
    try:
        if loop._instrumented:
            loop._instrument.before_phase("idle")
        loop._run_ready()
        loop._flush_writes()
        if loop._instrumented:
            loop._instrument.after_phase("idle")
    except BaseException as exc:
        loop._stash_error(exc)


cdef _flush_observed(TCPTransport transport):
    # tinyloop.trace: one turn's writes, sent by _flush in one uv_try_write
    # (one writev(2), skipped by libuv while earlier writes still queue);
    # what the kernel did not take waits in libuv's write queue.
    cdef Py_ssize_t size = transport._pending_size
    cdef size_t queued = 0
    if transport._handle is not NULL:
        queued = uv.uv_stream_get_write_queue_size(<uv.uv_stream_t*>transport._handle)
    transport._flush()
    if size and transport._loop._instrument is not None:
        left = transport.get_write_buffer_size()
        transport._loop._instrument.transport_wrote(
            transport, max(0, size - (left - <Py_ssize_t>queued)), 0 if queued else 1, left)


cdef void _on_prepare(uv.uv_prepare_t* handle) noexcept nogil:
    # libuv polls next, for uv_backend_timeout ms (-1: until an event): the
    # instruments hear of the wait, and the wait gives the GIL away (the
    # Discussion above _hold_gil).  Every wait does: uv_backend_timeout
    # says 0 while epoll_ctl changes are pending, which uv_run then makes
    # before it computes the wait it really makes.
    global tinyloop_wait_state
    cdef CheckState* state = <CheckState*>handle.data
    if state.instrumented:
        _report_wait(<UVLoop>state.loop, uv.uv_backend_timeout(handle.loop))
    if tinyloop_in_run and tinyloop_wait_state is NULL:
        tinyloop_wait_state = PyEval_SaveThread()


cdef void _report_wait(UVLoop loop, int timeout) noexcept with gil:
    try:
        loop._instrument.before_io_wait(None if timeout < 0 else timeout / 1000.0)
    except BaseException as exc:
        loop._stash_error(exc)


cdef void _on_check(uv.uv_check_t* handle) noexcept nogil:
    # After the I/O callbacks: send what they wrote, in one write per
    # transport; make sure what they queued runs in the next iteration
    # (Python code may append to _ready directly: Part III's signal
    # handling does); and end the run if one of them called stop().  An
    # iteration with no I/O callback (a busy ready queue) has nothing to do
    # here, and skips taking the GIL at all.
    cdef CheckState* state = <CheckState*>handle.data
    cdef int io_ran = state.io_ran
    _hold_gil()
    if not io_ran and not state.instrumented:
        return
    state.io_ran = 0
    with gil:
        if state.instrumented:
            _after_io_observed(<UVLoop>state.loop, io_ran)
        else:
            _after_io(<UVLoop>state.loop)


cdef void _after_io_observed(UVLoop loop, int io_callbacks) noexcept:
    # tinyloop.trace: the poll phase is over.  Its I/O callbacks ran inside
    # it, as libuv read the ready list, so the wait's span holds them; the
    # count is how many there were (a ready descriptor's, a read's, a
    # finished write's).
    try:
        instrument = loop._instrument
        if instrument is not None:
            instrument.after_io_wait(io_callbacks)
            instrument.before_phase("check")
        _after_io(loop)
        if loop._instrument is not None:
            loop._instrument.after_phase("check")
    except BaseException as exc:
        loop._stash_error(exc)


cdef void _after_io(UVLoop loop) noexcept:
    try:
        loop._flush_writes()
        if loop._ready:
            loop._arm_idle()
        if loop._stopping:
            uv.uv_stop(loop.uvloop)
    except BaseException as exc:
        loop._stash_error(exc)


cdef void _on_async(uv.uv_async_t* handle) noexcept nogil:
    # call_soon_threadsafe's wake-up: the handle is in _ready already.
    _hold_gil()
    _arm_idle_of(handle)


cdef void _arm_idle_of(uv.uv_async_t* handle) noexcept with gil:
    (<UVLoop>handle.data)._arm_idle()


cdef void _close_handle(uv.uv_handle_t* handle) noexcept:
    # Detach the handle from its Python object, then give it back to libuv.
    handle.data = NULL
    uv.uv_close(handle, _on_close_free)


cdef void _on_walk_close(uv.uv_handle_t* handle, void* arg) noexcept with gil:
    # close(): whatever handle is still open.  Only a transport nobody
    # closed can be (our own handles are closed by then): it is told, so it
    # lets go of the handle and warns, as an unclosed transport does; or a
    # child still running (spawn.pyx), whose handle is let go of the same way.
    if uv.uv_is_closing(handle):
        return
    if handle.type == uv.UV_PROCESS and handle.data is not NULL:
        (<UVProcess>handle.data)._abandon()   # a child still running (it closes the handle)
        return
    if handle.type == uv.UV_TCP and handle.data is not NULL:
        try:
            (<TCPTransport>handle.data)._abandon()
        except BaseException:
            pass   # a warning turned into an error must not stop the close
    else:
        (<int*>arg)[0] += 1   # not a transport: one of ours that leaked
    _close_handle(handle)


cdef class UVLoop:
    """The C half of :class:`tinyloop.uv.Loop`: libuv's loop, the ready queue's
    runner, the timer heap, readiness, and TCP transports.

    Not used alone: tinyloop.uv.Loop mixes it with Part III's loop.
    """

    def __cinit__(self, *args, **kwargs):
        cdef int err
        self.uvloop = <uv.uv_loop_t*>PyMem_RawMalloc(sizeof(uv.uv_loop_t))
        if self.uvloop is NULL:
            raise MemoryError()
        err = uv.uv_loop_init(self.uvloop)
        if err < 0:
            PyMem_RawFree(self.uvloop)
            self.uvloop = NULL
            raise _uv_error(err)
        # The loop's data points at our count of live handles, so that a
        # close callback can count one down without touching Python (it may
        # run from __dealloc__, when this object is already going).
        self.uvloop.data = <void*>&self._live_handles
        self._polls = {}
        self._to_flush = []
        self._tcp_transports = {}
        # Page-aligned: the kernel's copy into it (recv) is a string move
        # that runs fastest to an aligned destination.
        if posix_memalign(<void**>&self._recv_buffer, 4096, READ_BUFFER_SIZE) != 0:
            self._recv_buffer = NULL
            raise MemoryError()
        self._armed_when = -1.0

        self._idle = <uv.uv_idle_t*>self._alloc_handle(sizeof(uv.uv_idle_t))
        uv.uv_idle_init(self.uvloop, self._idle)
        self._check = <uv.uv_check_t*>self._alloc_handle(sizeof(uv.uv_check_t))
        uv.uv_check_init(self.uvloop, self._check)
        self._timer = <uv.uv_timer_t*>self._alloc_handle(sizeof(uv.uv_timer_t))
        uv.uv_timer_init(self.uvloop, self._timer)
        self._async = <uv.uv_async_t*>self._alloc_handle(sizeof(uv.uv_async_t))
        uv.uv_async_init(self.uvloop, self._async, _on_async)
        self._idle.data = <void*>self
        self._check_state.loop = <void*>self
        self._check.data = &self._check_state
        self._timer.data = <void*>self
        self._async.data = <void*>self

        # The check handle runs in every iteration but must not keep uv_run
        # alive on its own; the async handle must (it is what a run_forever
        # with nothing scheduled waits on, as asyncio's self-pipe is).
        uv.uv_check_start(self._check, _on_check)
        uv.uv_unref(<uv.uv_handle_t*>self._check)
        self._sync_instrumented()   # the prepare handle: the GIL is lent out for waits
        _live_loops.add(self)

    cdef void* _alloc_handle(self, size_t size) except NULL:
        cdef void* memory = PyMem_RawMalloc(size)
        if memory is NULL:
            raise MemoryError()
        memset(memory, 0, size)
        self._live_handles += 1
        return memory

    cdef _after_fork_in_child(self):
        # In a fork child, from the at-fork hook: see "fork(2)" above.
        cdef int err
        if self.uvloop is NULL:
            return
        err = uv.uv_loop_fork(self.uvloop)
        if err < 0:
            self._fork_error = _uv_error(err)
            return
        self._async.pending = 0
        # Part II's self-pipe, by the names its Reactor contract gives them
        # (None on a loop forked before Part II's __init__ made the pair).
        ssock, csock = self._ssock, self._csock
        if ssock is not None and csock is not None and ssock.fileno() >= 0:
            new_ssock, new_csock = socket.socketpair()
            new_ssock.setblocking(False)
            new_csock.setblocking(False)
            os.dup2(new_ssock.fileno(), ssock.fileno(), inheritable=False)
            os.dup2(new_csock.fileno(), csock.fileno(), inheritable=False)
            new_ssock.close()
            new_csock.close()
        if self._default_executor is not None:   # Part III's (its AioBase contract)
            self._default_executor = None

    def __dealloc__(self):
        # close() should have run; if not, free libuv's loop without Python.
        if self.uvloop is not NULL:
            self._close_uv()

    # -- Instruments (tinyloop.trace) ----------------------------------------------------

    def add_instrument(self, instrument):
        """Part II's ``add_instrument``; then the C flag the hot paths test is set."""
        _instruments.add_instrument(self, instrument)
        self._sync_instrumented()

    def remove_instrument(self, instrument):
        """Part II's ``remove_instrument``; with the last one gone the C flag is cleared."""
        removed = _instruments.remove_instrument(self, instrument)
        self._sync_instrumented()
        return removed

    cdef _sync_instrumented(self):
        # Discussion: the Python attribute says whether instruments are
        # installed; the C flags copy it, so the idle, check, timer and I/O
        # callbacks test a C int and, with no instrument, make no Python call.
        # The prepare handle (made here, or by __cinit__) reports the wait to
        # the instruments when they are installed; unreferenced, it never
        # keeps uv_run alive.
        self._instrumented = self._check_state.instrumented = self._instrument is not None
        if self.uvloop is NULL:
            return
        if self._prepare is NULL:
            self._prepare = <uv.uv_prepare_t*>self._alloc_handle(sizeof(uv.uv_prepare_t))
            uv.uv_prepare_init(self.uvloop, self._prepare)
            self._prepare.data = &self._check_state
            uv.uv_unref(<uv.uv_handle_t*>self._prepare)
            uv.uv_prepare_start(self._prepare, _on_prepare)

    # -- Time ----------------------------------------------------------------------

    def time(self):
        """Seconds on the monotonic clock (uv_hrtime(3): CLOCK_MONOTONIC, in ns).

        The clock is libuv's, the same one time.monotonic() reads on Linux;
        Part III's injected ``clock`` is not used.
        """
        return _now()

    # -- Scheduling -------------------------------------------------------------------

    def call_soon(self, callback, *args, context=None):
        """Run ``callback(*args)`` in ``context`` soon; returns a Handle.

        As Part III's call_soon: RuntimeError if the loop is closed; in debug
        mode TypeError for a coroutine function and RuntimeError from
        another thread.
        """
        if self._closed:
            self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_soon")
        cdef Handle handle = _new_handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    cdef Handle _call_soon_c(self, object callback, tuple args):
        # call_soon for this extension's own callbacks (tcp.pyx): the same
        # checks, without a Python call to reach it.
        if self._closed:
            self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_soon")
        cdef Handle handle = _new_handle(callback, args, self, None)
        self._ready.append(handle)
        return handle

    def call_soon_threadsafe(self, callback, *args, context=None):
        """call_soon from any thread: wakes the loop with uv_async_send (async.html)."""
        self._check_callback(callback, "call_soon_threadsafe")
        cdef Handle handle = _new_handle(callback, args, self, context)
        self._ready.append(handle)   # deque.append is atomic under the GIL
        uv.uv_async_send(self._async)
        return handle

    def call_later(self, delay, callback, *args, context=None):
        """Run ``callback(*args)`` after ``delay`` seconds; returns a TimerHandle."""
        if delay is None:
            raise TypeError("delay must not be None")
        return self._call_at(_now() + delay, callback, args, context)

    def call_at(self, when, callback, *args, context=None):
        """Run ``callback(*args)`` at ``when`` seconds on :meth:`time`; returns a TimerHandle."""
        if when is None:
            raise TypeError("when cannot be None")
        return self._call_at(when, callback, args, context)

    cdef TimerHandle _call_at(self, double when, object callback, tuple args, object context):
        if self._closed:
            self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        cdef TimerHandle timer = TimerHandle.__new__(TimerHandle)
        timer._callback = callback
        timer._args = args
        timer._loop = self
        timer._context = PyContext_CopyCurrent() if context is None else context
        timer._when = when
        if self._debug:
            timer._source_traceback = _source_stack()
        self._push_timer(timer)
        return timer

    # -- Tasks ------------------------------------------------------------------------------

    def create_task(self, coro, *, name=None, context=None, **kwargs):
        """Wrap the coroutine ``coro`` in an asyncio.Task (or the task factory's) and schedule it.

        As Part III's create_task (asyncio's contract): ``name`` names the
        task, ``context`` is the contextvars.Context its steps run in, and
        other keywords (``eager_start`` on 3.14) go to the Task or the
        factory, ``factory(loop, coro, **kwargs)``.  Raises RuntimeError if
        the loop is closed, TypeError if ``coro`` is not a coroutine (from
        asyncio.Task).
        """
        # Discussion: the Task is asyncio's own (its C version, _asyncio.Task);
        # only the call to it moves into C: no Python frame, no keyword
        # dict, one attribute read for the factory.  With no Python frame of
        # ours on the stack, a debug-mode task's _source_traceback already
        # ends at our caller, where Part III's drops its own frame.
        if self._task_factory is not None:   # a factory's call is Part III's, unchanged
            return _aio_create_task(self, coro, name=name, context=context, **kwargs)
        if self._closed:
            self._check_closed()
        if kwargs:
            return _Task(coro, loop=self, name=name, context=context, **kwargs)
        return _Task(coro, loop=self, name=name, context=context)

    def create_future(self):
        """A new ``asyncio.Future`` bound to this loop, as Part III's create_future."""
        # Discussion: a streams server makes one future per read (the
        # StreamReader's waiter), and asyncio's C Future asks the loop's
        # get_debug() as it starts: here neither call runs a Python frame.
        # In debug mode Part III's Python method makes it, so that the
        # future's _source_traceback ends in the same frame as asyncio's.
        if self._debug:
            return _aio_create_future(self)
        return _Future(loop=self)

    def get_debug(self):
        """True in debug mode (set_debug, or PYTHONASYNCIODEBUG as Part III reads it)."""
        return self._debug

    # -- The ready queue -----------------------------------------------------------------

    cdef inline void _arm_idle(self) noexcept:
        if not self._idle_active:
            uv.uv_idle_start(self._idle, _on_idle)
            self._idle_active = True

    cdef int _run_ready(self) except -1:
        # Step 4 of Part II's iteration, unchanged in meaning: run exactly the
        # callbacks that are ready now; what they schedule waits its turn.
        cdef object ready = self._ready
        cdef Py_ssize_t ntodo = len(ready)
        cdef object item
        cdef Handle handle
        # exercise uv-ready-queue: begin
        while ntodo > 0:
            ntodo -= 1
            item = ready.popleft()
            if type(item) is Handle or type(item) is TimerHandle:
                handle = <Handle>item
                if handle._cancelled:
                    continue
                if self._debug or self._instrumented:
                    self._run_handle(handle)   # Part II's: times it, names slow ones, calls instruments
                else:
                    handle._run_c()
            elif not item._cancelled:          # a Part III handle (signals queue them)
                self._run_handle(item)
        if self._stopping:
            uv.uv_stop(self.uvloop)   # uv_run returns at the end of this iteration
        elif not ready and self._idle_active:
            uv.uv_idle_stop(self._idle)
            self._idle_active = False
        # exercise uv-ready-queue: end
        return 0

    cdef _stash_error(self, BaseException exc):
        # Keep the first; stop uv_run so run_once can raise it.
        if self._last_error is None:
            self._last_error = exc
        uv.uv_stop(self.uvloop)

    # -- The iteration ------------------------------------------------------------------

    def run_once(self):
        """Hand the thread to libuv: uv_run(UV_RUN_DEFAULT) until stop() (loop.html).

        Part II's run_forever calls run_once until ``_stopping`` is set; here
        one call runs every iteration up to that point, because libuv's
        phases replace Part II's four steps: due timers (our one
        uv_timer_t), idle (the ready queue), poll for I/O (uv_poll
        and uv_tcp callbacks), check (queued writes), close callbacks.
        stop() ends it with uv_stop after the current batch of callbacks.
        The GIL is released while libuv waits for I/O (_on_prepare), so
        executor threads run then, and held while callbacks run.  Raises what a
        callback let through (KeyboardInterrupt, SystemExit).
        """
        global tinyloop_in_run
        cdef object error
        cdef object previous = None
        if self._fork_error is not None:
            error, self._fork_error = self._fork_error, None
            raise RuntimeError("uv_loop_fork failed in this fork child: the loop cannot "
                               "be used here") from error
        if self._ready or self._stopping:
            self._arm_idle()   # anything queued from Python (or before run_forever) runs now
        if threading.get_ident() == _MAIN_THREAD:
            # Discussion: a signal's Python handler (KeyboardInterrupt for
            # Ctrl-C, asyncio.Runner's, SIGTERM's) runs only when the main
            # thread runs Python code.  Blocked in epoll_wait(2) inside
            # libuv, it would not: libuv restarts the wait after EINTR.  So
            # while we run, the signal's byte goes to Part II's self-pipe,
            # which a uv_poll watches; its callback is Python code, and the
            # handler runs there.  uvloop does the same.
            previous = signal.set_wakeup_fd(self._csock.fileno(), warn_on_full_buffer=False)
        tinyloop_in_run = 1
        try:
            uv.uv_run(self.uvloop, uv.UV_RUN_DEFAULT)   # with the GIL: _on_prepare lends it out for waits
        finally:
            _hold_gil()
            tinyloop_in_run = 0
            if previous is not None:
                signal.set_wakeup_fd(previous)
        if self._last_error is not None:
            error, self._last_error = self._last_error, None
            raise error

    # -- Timers (the heap itself is in timers.pyx) -----------------------------------------

    cdef _push_timer(self, TimerHandle timer):
        cdef TimerEntry* grown
        cdef Py_ssize_t capacity
        if self._heap_len == self._heap_capacity:
            capacity = self._heap_capacity * 2 if self._heap_capacity else 64
            grown = <TimerEntry*>PyMem_RawRealloc(self._heap, capacity * sizeof(TimerEntry))
            if grown is NULL:
                raise MemoryError()
            self._heap = grown
            self._heap_capacity = capacity
        Py_INCREF(timer)
        self._heap[self._heap_len].when = timer._when
        self._heap[self._heap_len].sequence = self._timer_sequence
        self._heap[self._heap_len].timer = <void*>timer
        self._timer_sequence += 1
        self._heap_len += 1
        _sift_up(self._heap, self._heap_len - 1)
        timer._in_heap = True
        if self._heap[0].timer == <void*>timer:
            self._arm_timer()

    cdef _arm_timer(self):
        # Point the one uv_timer_t at the earliest deadline.
        cdef double when, delay
        cdef uint64_t ms
        # exercise uv-timer-heap: begin
        while self._heap_len and (<TimerHandle>self._heap[0].timer)._cancelled:
            _pop_top(self)
            self._timers_cancelled -= 1
        if not self._heap_len:
            uv.uv_timer_stop(self._timer)
            self._armed_when = -1.0
            return
        when = self._heap[0].when
        if when == self._armed_when:
            return
        # uv_timer_start counts from uv_now(), cached at the start of the
        # iteration; bring it up to date, or a timer set after a slow
        # callback would fire early (and be re-armed: harmless, but a turn).
        uv.uv_update_time(self.uvloop)
        delay = when - _now()
        # Discussion: uv_timer_start takes whole milliseconds as a uint64_t,
        # and converting inf, or a double past 2**64, to one is undefined in
        # C (on x86 it gives 0: a timer due now, re-armed for ever, a spin
        # that never polls).  asyncio accepts any delay and caps one wait at
        # a day (MAXIMUM_SELECT_TIMEOUT, Part II's too); so do we: the heap
        # keeps the true deadline, and a far one only wakes us once a day to
        # re-arm.  NaN is not > 0 and arms 0, as asyncio runs it at once.
        if delay > MAXIMUM_SELECT_TIMEOUT:
            delay = MAXIMUM_SELECT_TIMEOUT
        ms = <uint64_t>ceil(delay * 1000.0) if delay > 0 else 0
        uv.uv_timer_start(self._timer, _on_timer, ms, 0)
        self._armed_when = when
        # exercise uv-timer-heap: end

    cdef int _fire_timers(self) except -1:
        # The uv_timer_t fired: move every due timer to the ready queue, in
        # deadline order, then re-arm for the next.  A timer is due when its
        # deadline has passed on time(); libuv counts whole milliseconds, so
        # it may wake us a fraction of one early, and then nothing is due
        # yet and we re-arm for the rest.
        cdef double now = _now()
        cdef TimerHandle timer
        cdef object ready = self._ready
        # exercise uv-timer-heap: begin
        self._armed_when = -1.0
        while self._heap_len and not self._heap[0].when > now:   # NaN is due, as in asyncio
            timer = _pop_top(self)
            if timer._cancelled:
                self._timers_cancelled -= 1
            else:
                ready.append(timer)
        self._arm_timer()
        if ready:
            self._arm_idle()
        # exercise uv-timer-heap: end
        return 0

    cdef _timer_cancelled(self, TimerHandle timer):
        self._timers_cancelled += 1
        if (self._timers_cancelled > _MIN_CANCELLED_TIMERS
                and self._timers_cancelled * 2 > self._heap_len):
            self._compact_timers()

    cdef _compact_timers(self):
        # Drop every cancelled entry in one pass, then re-heapify (Floyd's
        # bottom-up build, O(n)).  Sequence numbers keep ties in order.
        cdef Py_ssize_t i, kept = 0
        cdef TimerHandle timer
        for i in range(self._heap_len):
            timer = <TimerHandle>self._heap[i].timer
            if timer._cancelled:
                timer._in_heap = False
                Py_DECREF(timer)
            else:
                self._heap[kept] = self._heap[i]
                kept += 1
        self._heap_len = kept
        self._timers_cancelled = 0
        i = kept // 2 - 1
        while i >= 0:
            _sift_down(self._heap, kept, i)
            i -= 1
        self._arm_timer()

    cdef _clear_timers(self):
        cdef Py_ssize_t i
        cdef TimerHandle timer
        for i in range(self._heap_len):
            timer = <TimerHandle>self._heap[i].timer
            timer._in_heap = False
            Py_DECREF(timer)
        self._heap_len = 0
        self._timers_cancelled = 0

    # -- Readiness (UVPoll is in poll.pyx) --------------------------------------------------
    #
    # Part III reaches readiness through four unchecked doors (_add_reader,
    # _add_writer, _remove_reader, _remove_writer) behind the checked public
    # ones; we replace the four doors and inherit the checks.

    cdef UVPoll _poll_for(self, int fd):
        cdef UVPoll poll = self._polls.get(fd)
        cdef int err
        if poll is not None:
            return poll
        poll = UVPoll.__new__(UVPoll)
        poll.loop = self
        poll.fd = fd
        poll.handle = <uv.uv_poll_t*>self._alloc_handle(sizeof(uv.uv_poll_t))
        err = uv.uv_poll_init_socket(self.uvloop, poll.handle, fd)
        if err < 0:
            # Not pollable (a regular file: EPERM, as epoll_ctl(2) says) or
            # not open (EBADF).  Nothing was registered; free the memory now.
            PyMem_RawFree(poll.handle)
            self._live_handles -= 1
            poll.handle = NULL
            raise _uv_error(err)
        poll.handle.data = <void*>poll
        self._polls[fd] = poll
        return poll

    def _add_reader(self, fd, callback, *args):
        """Call ``callback(*args)`` whenever ``fd`` is readable; replaces any reader.

        ``fd`` is an int or has ``fileno()``.  Returns the Handle.  Raises
        RuntimeError on a closed loop, OSError when libuv cannot poll ``fd``.
        """
        return self._add_interest_c(fd, callback, args, True)

    def _add_writer(self, fd, callback, *args):
        """As _add_reader, for writability."""
        return self._add_interest_c(fd, callback, args, False)

    def _remove_reader(self, fd):
        """Stop watching ``fd`` for reading; True if a reader was set."""
        return self._remove_interest_c(fd, True)

    def _remove_writer(self, fd):
        """Stop watching ``fd`` for writing; True if a writer was set."""
        return self._remove_interest_c(fd, False)

    def _ensure_fd_no_transport(self, fd):
        """Part III's check (RuntimeError if a transport owns ``fd``; ValueError
        for what is no descriptor), then the same for the TCP transports,
        which this loop registers in C (tcp.pyx)."""
        super()._ensure_fd_no_transport(fd)
        ref = self._tcp_transports.get(fd if isinstance(fd, int) else int(fd.fileno()))
        transport = ref() if ref is not None else None
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    # -- Serving: the accept path in C (tcp.pyx) ------------------------------------------

    def _start_serving(self, protocol_factory, sock, sslcontext=None, server=None, backlog=100,
                       ssl_handshake_timeout=None, ssl_shutdown_timeout=None):
        """Accept on ``sock`` for ``server``: a TCP listener without TLS accepts in
        C (tcp.pyx's _TCPListener); any other takes Part III's Python path.
        Part III's _stop_serving and back-off work on both (the reader is the
        listener's)."""
        family, kind, proto = _aio_selector_events._socket_kind(sock)
        if sslcontext is not None or family not in _INET or kind != socket.SOCK_STREAM:
            return super()._start_serving(protocol_factory, sock, sslcontext, server, backlog,
                                          ssl_handshake_timeout, ssl_shutdown_timeout)
        if sock.fileno() == -1:
            return   # closed while it rested
        cdef _TCPListener listener = _TCPListener.__new__(_TCPListener)
        listener.loop = self
        listener.sock = sock
        listener.fd = sock.fileno()
        listener.family = family
        listener.proto = proto
        listener.protocol_factory = protocol_factory
        listener.server = server
        listener.backlog = backlog
        listener.serving = (protocol_factory, sock, sslcontext, server, backlog,
                            ssl_handshake_timeout, ssl_shutdown_timeout)
        listener.resting = listener.fd in self._accept_backoff
        self._add_interest_c(sock, listener, (), True)

    cdef _add_interest_c(self, fd, callback, tuple args, bint reading):
        self._check_callback(callback, "add_reader" if reading else "add_writer")
        cdef int fileno = fd if isinstance(fd, int) else fd.fileno()
        if fileno < 0:
            raise ValueError(f"Invalid file descriptor: {fileno}")
        cdef UVPoll poll = self._poll_for(fileno)
        cdef Handle handle = _new_handle(callback, args, self, None)
        cdef Handle old
        if reading:
            old, poll.reader = poll.reader, handle
        else:
            old, poll.writer = poll.writer, handle
        try:
            poll._update()
        except BaseException:
            if reading:
                poll.reader = old
            else:
                poll.writer = old
            if poll.reader is None and poll.writer is None:
                poll._close()
            raise
        if old is not None:
            old.cancel()
        return handle

    cdef _remove_interest_c(self, fd, bint reading):
        if self._closed:
            return False
        cdef int fileno
        try:
            fileno = fd if isinstance(fd, int) else fd.fileno()
        except (ValueError, OSError):
            return False
        cdef UVPoll poll = self._polls.get(fileno)
        if poll is None:
            return False
        cdef Handle old
        if reading:
            old, poll.reader = poll.reader, None
        else:
            old, poll.writer = poll.writer, None
        poll._update()
        if old is None:
            return False
        old.cancel()
        return True

    # -- Writes queued in a turn (tcp.pyx) ----------------------------------------------------

    cdef int _flush_writes(self) except -1:
        # A flush can call the protocol (resume_writing, after a batch the
        # kernel took whole), and the protocol can write again: send that
        # too, before the loop may block.
        cdef list queued
        cdef TCPTransport transport
        while self._to_flush:
            queued, self._to_flush = self._to_flush, []
            for transport in queued:
                transport._queued = False
                if self._instrumented:
                    _flush_observed(transport)
                else:
                    transport._flush()
        return 0

    # -- Closing -------------------------------------------------------------------------------

    def _close_uv(self):
        """Close every libuv handle, let libuv run their close callbacks, free the loop.

        Called by close() after Part III's close; idempotent.  A debug build
        raises RuntimeError if a handle we opened was not closed by then.
        """
        if self.uvloop is NULL:
            return
        self._clear_timers()
        PyMem_RawFree(self._heap)
        self._heap = NULL
        self._heap_capacity = 0
        for poll in list(self._polls.values()):
            (<UVPoll>poll)._close()
        _close_handle(<uv.uv_handle_t*>self._idle)
        _close_handle(<uv.uv_handle_t*>self._check)
        _close_handle(<uv.uv_handle_t*>self._timer)
        _close_handle(<uv.uv_handle_t*>self._async)
        if self._prepare is not NULL:
            _close_handle(<uv.uv_handle_t*>self._prepare)
            self._prepare = NULL
        # Anything else still open is a transport nobody closed (it warns),
        # or a handle of ours we lost track of (a bug: counted in `leaked`).
        cdef int leaked = 0
        uv.uv_walk(self.uvloop, _on_walk_close, &leaked)
        while uv.uv_run(self.uvloop, uv.UV_RUN_NOWAIT):
            pass
        cdef Py_ssize_t live = self._live_handles
        uv.uv_loop_close(self.uvloop)
        PyMem_RawFree(self.uvloop)
        self.uvloop = NULL
        free(self._recv_buffer)
        self._recv_buffer = NULL
        if UV_DEBUG and (leaked or live) and not sys.is_finalizing():
            raise RuntimeError(f"tinyloop.uv debug build: at close(), {leaked} of our libuv "
                               f"handle(s) were still open and {live} not yet freed")

    def close(self):
        """Close the loop: Part III's close, then libuv's handles and loop.

        Idempotent; RuntimeError if the loop is running (from Part III).
        """
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        super().close()
        self._close_uv()

    # -- Inspection for tests and the debug build -----------------------------------------------

    def _debug_counts(self):
        """{'live_handles': n, 'polls': n, 'timers': n}: what the loop holds now."""
        return {"live_handles": self._live_handles, "polls": len(self._polls),
                "timers": self._heap_len - self._timers_cancelled}
