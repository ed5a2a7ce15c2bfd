# tinyloop/uv/timers.pyx  (included by _loop.pyx)
#
# The timer heap, kept in C, behind one uv_timer_t.
#
# Rules this file keeps:
#   * The heap is an array of TimerEntry structs (deadline, sequence,
#     pointer): sifting compares two doubles, never calls a Python __lt__.
#   * The heap owns one reference to each TimerHandle in it; every path
#     that takes an entry out (pop, compaction, close) drops it.
#   * One uv_timer_t is armed for the earliest deadline only, and re-armed
#     when that changes.  Cancellation is lazy, as in Part II: cancel()
#     marks the handle, and the heap drops it when it reaches the top, or
#     in one compaction when the cancelled are both many and the majority.
#
# Discussion: libuv has a timer heap of its own, and the simplest port
# gives each call_later its own uv_timer_t.  That costs a malloc, a
# uv_timer_init and a uv_timer_start per timer, a uv_close (with a close
# callback one iteration later) per cancel, and a Python object kept alive
# until that callback.  A request timeout is scheduled and cancelled once
# per request, so that is the path to make cheap.  zuvloop keeps one native
# heap behind one uv_timer_t; so do we.  The other design is not shipped:
# the benchmarks build it from a copy of these sources with a patch
# applied (their "timer-per-handle" variant), and the libuv chapter
# measures the two.

from libc.math cimport ceil

# Compaction threshold, as Part II's (tinyloop/callbacks/loop.py).
cdef Py_ssize_t _MIN_CANCELLED_TIMERS = 100


cdef inline bint _earlier(TimerEntry* a, TimerEntry* b) noexcept nogil:
    return a.when < b.when or (a.when == b.when and a.sequence < b.sequence)


cdef inline void _sift_up(TimerEntry* heap, Py_ssize_t i) noexcept nogil:
    cdef TimerEntry item = heap[i]
    cdef Py_ssize_t parent
    while i > 0:
        parent = (i - 1) >> 1
        if not _earlier(&item, &heap[parent]):
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = item


cdef inline void _sift_down(TimerEntry* heap, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    cdef TimerEntry item = heap[i]
    cdef Py_ssize_t child
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _earlier(&heap[child + 1], &heap[child]):
            child += 1
        if not _earlier(&heap[child], &item):
            break
        heap[i] = heap[child]
        i = child
    heap[i] = item


cdef inline TimerHandle _pop_top(UVLoop loop):
    # Take the earliest entry out of the heap; the caller gets our reference.
    cdef TimerEntry top = loop._heap[0]
    loop._heap_len -= 1
    if loop._heap_len:
        loop._heap[0] = loop._heap[loop._heap_len]
        _sift_down(loop._heap, loop._heap_len, 0)
    cdef TimerHandle timer = <TimerHandle>top.timer
    Py_DECREF(timer)   # the heap's reference, now held by the local variable
    timer._in_heap = False
    return timer


cdef void _on_timer(uv.uv_timer_t* handle) noexcept with gil:
    cdef UVLoop loop = <UVLoop>handle.data
    cdef Py_ssize_t queued
    try:
        if not loop._instrumented:
            loop._fire_timers()
        else:  # tinyloop.trace: how many timers this moved to the ready queue
            queued = len(loop._ready)
            loop._fire_timers()
            loop._instrument.timers_due(len(loop._ready) - queued, len(loop._ready))
    except BaseException as exc:
        loop._stash_error(exc)
