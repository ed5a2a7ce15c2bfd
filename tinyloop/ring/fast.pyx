# tinyloop/ring/fast.pyx, included by _uring.pyx
"""The request's path in C: the proactor's wait, the loop's iteration, and the socket transport.

_uring.pyx's Ring moved the ring into C; the Python around it still ran
about thirty Python calls per request (the iteration of Part II, the
proactor's ``select``, the transport's completion callbacks, its
``write``), most of the loop's own instructions.  This file moves
the ones on a request's path, in the way Part IV moved Part III's
(tinyloop/uv/_loop.pyx): each class here is a C base class put in front
of the Python class that keeps everything else, so a method defined here
replaces the Python one of the same name and every other method, the
rare paths, is the Python one, unchanged.

    ProactorCore   before tinyloop.ring.proactor.Proactor (tinyloop/ring/core.py):
                   recv, send, accept, cancel and select in C; the polls, the
                   timer and the observing stay Python, called only when there
                   is work for them
    StreamCore     before tinyloop.ring.loop.RingSocketTransport: the receive's
                   completion, the delivery, write, the send and its completion
    LoopCore       before Part III's loop in tinyloop.ring.loop.Loop: Part II's
                   four steps in C, on the fields they read, iteration after
                   iteration until stop(); and call_soon (with spare handles),
                   create_future and get_debug, which a streams server calls
                   for every read
    TransportHandle  Part III's Handle, the class of a transport's receive
                   handle, which the iteration runs with a C call
    Operations     the proactor's table (a dict in tinyloop/ring/proactor.py),
                   with a slot map for a transport's receives and sends

Rules this file keeps:
  * Same behaviour, line for line, as the Python it replaces; the state
    is the Python classes' own, under the same names, so both halves see
    one object: in C fields that Python reads and sets through those
    names (``cdef public``), so a read on a request's path is a load from
    the object, not a dictionary lookup (StreamCore's Discussion says how
    a C class can hold them under asyncio's BaseTransport).
  * Only the common case is in C.  A debug-mode loop, one with an
    instrument, a poll to arm, a timer to move: the C hands them to the
    Python methods that do it.
  * A Python subclass still overrides a method here for its Python
    callers, but the C paths call each other directly: subclass the
    Python RingSocketTransport (the ``python`` core's) to change them.
"""

from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.method cimport PyMethod_Check, PyMethod_GET_SELF
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.contextvars cimport PyContext_CopyCurrent, PyContext_Enter, PyContext_Exit
from cpython.pythread cimport PyThread_get_thread_ident
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from tinyloop.aio.events import Handle as _AioHandle, TimerHandle as _AioTimerHandle
from tinyloop.aio.base_events import BaseEventLoop as _AioLoop
from tinyloop.callbacks.loop import Loop as _Reactor, MAXIMUM_SELECT_TIMEOUT as _MAXIMUM_WAIT
from tinyloop.ring.proactor import _NOBODY, _TIMER_SLACK

from asyncio import Future as _Future
from collections import deque as _deque

_aio_call_soon = _AioLoop.call_soon
_aio_create_future = _AioLoop.create_future

# The ready queue is Part II's ``collections.deque``, which has no C API:
# from Cython, ``ready.append(handle)`` looks ``append`` up on the type and
# calls it through the method-call protocol, over a hundred instructions for a
# C function of ten.  A method descriptor holds that C function
# (PyMethodDef.ml_meth), so these call it directly, on a deque exactly
# (a subclass's methods may be its own: those are called by name).
cdef extern from *:
    """
    static PyTypeObject *tinyloop_deque;
    static PyCFunction tinyloop_deque_append, tinyloop_deque_popleft;

    static PyCFunction tinyloop_c_method(PyObject *kind, const char *name, int flags) {
        PyObject *descriptor = PyObject_GetAttrString(kind, name);
        PyCFunction function = NULL;
        if (descriptor == NULL) return NULL;
        if (Py_IS_TYPE(descriptor, &PyMethodDescr_Type)
                && ((PyMethodDescrObject *)descriptor)->d_method->ml_flags == flags)
            function = ((PyMethodDescrObject *)descriptor)->d_method->ml_meth;
        else
            PyErr_Format(PyExc_TypeError, "%s is not a C method taking %s", name,
                         flags == METH_O ? "one argument" : "no argument");
        Py_DECREF(descriptor);
        return function;
    }

    static int tinyloop_find_deque(PyObject *kind) {
        tinyloop_deque = (PyTypeObject *)kind;
        tinyloop_deque_append = tinyloop_c_method(kind, "append", METH_O);
        if (tinyloop_deque_append == NULL) return -1;
        tinyloop_deque_popleft = tinyloop_c_method(kind, "popleft", METH_NOARGS);
        return tinyloop_deque_popleft == NULL ? -1 : 0;
    }

    /* queue.append(item); -1 with an exception set on failure. */
    static int tinyloop_append(PyObject *queue, PyObject *item) {
        PyObject *result = Py_IS_TYPE(queue, tinyloop_deque)
            ? tinyloop_deque_append(queue, item) : PyObject_CallMethod(queue, "append", "O", item);
        if (result == NULL) return -1;
        Py_DECREF(result);
        return 0;
    }

    /* queue.popleft(), a new reference; NULL with an exception set on failure. */
    static PyObject *tinyloop_popleft(PyObject *queue) {
        return Py_IS_TYPE(queue, tinyloop_deque)
            ? tinyloop_deque_popleft(queue, NULL) : PyObject_CallMethod(queue, "popleft", NULL);
    }

    /* len(queue), for the ready queue and the timer heap: a deque keeps its
       length in its ob_size (deque_len returns Py_SIZE), as a list does;
       anything else, len().  -1 with an exception set on failure. */
    static Py_ssize_t tinyloop_length(PyObject *queue) {
        if (Py_IS_TYPE(queue, tinyloop_deque) || PyList_CheckExact(queue)) return Py_SIZE(queue);
        return PyObject_Length(queue);
    }
    """
    int tinyloop_find_deque(object kind) except -1
    int tinyloop_append(object queue, object item) except -1
    object tinyloop_popleft(object queue)
    Py_ssize_t _length "tinyloop_length"(object queue) except -1

tinyloop_find_deque(_deque)


cdef double MAXIMUM_WAIT = _MAXIMUM_WAIT
cdef double TIMER_SLACK = _TIMER_SLACK


cdef inline double _monotonic() noexcept nogil:
    # time.monotonic()'s clock (CLOCK_MONOTONIC), which the proactor's timer uses too.
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec + now.tv_nsec * 1e-9


cdef object _os_error(int res):
    return OSError(-res, os.strerror(-res))


cdef class Counter:
    """user_data's sequence, as ``itertools.count(start)``: ``next()`` gives start, start + 1, ...

    The C paths read and advance it without a call.
    """

    cdef unsigned long long value

    def __cinit__(self, unsigned long long start=1):
        self.value = start - 1

    def __iter__(self):
        return self

    def __next__(self):
        self.value += 1
        return self.value


# A held operation's user_data: bit 63 set (the Counter never gets there),
# its serial from the Counter above the slot's index, the index below.
cdef unsigned long long HELD = 1ULL << 63
cdef int INDEX_BITS = 20
cdef unsigned long long INDEX_MASK = (1ULL << INDEX_BITS) - 1
cdef unsigned long long SERIAL_MASK = (1ULL << (63 - INDEX_BITS)) - 1


cdef class Operations:
    """The proactor's table on the cython core: user_data -> completion callback, until its final CQE.

    The Python Proactor's table is a dict; this is the same mapping, with
    the methods the Proactor uses (item assignment, ``get``, ``pop``,
    ``in``, ``len``, ``values``, ``clear``), and a second place for the
    operations that are most of a server's: a transport's receives and
    sends, whose callbacks are TransportCompletions.  Those are *held*
    in a slot map, a C array of references; their user_data names the slot
    and the operation's serial, so an entry is found by an index and a
    comparison, with no hashing and no int object made or freed: about
    120 instructions to hold one and take it back, where a dict entry
    under a fresh int key cost about 740 (callgrind, per operation of a
    1 KiB echo).

    The Proactor's rules hold for both places: a fresh user_data for every
    submission (the serial is the Counter's, so a stale user_data, kept
    for a cancel, finds its slot empty or holding another serial), and
    the callback, with the buffer its transport holds, kept until the
    final CQE, or until :meth:`clear` after the ring is closed.  The held
    references are not shown to the cyclic collector: an operation the
    kernel holds is never garbage.
    """

    cdef dict _table              # every other operation: user_data -> callback, as the Python Proactor's
    cdef PyObject **_slots        # held TransportCompletions, by slot index (NULL: free)
    cdef Py_ssize_t *_free        # the free slots' indexes, a stack
    cdef Py_ssize_t _capacity, _free_count, _held

    def __cinit__(self):
        self._table = {}

    def __dealloc__(self):
        self._release_all()
        PyMem_Free(self._slots)
        PyMem_Free(self._free)

    cdef unsigned long long hold(self, TransportCompletion completion, unsigned long long serial) except? 0:
        # A slot for ``completion``, and the user_data that names it; 0 when
        # the slots are full (2**20 of them), and then the caller uses the dict.
        cdef Py_ssize_t index
        cdef unsigned long long user_data
        if self._free_count == 0 and not self._grow():
            return 0
        self._free_count -= 1
        index = self._free[self._free_count]
        Py_INCREF(completion)
        self._slots[index] = <PyObject *>completion
        self._held += 1
        user_data = HELD | ((serial & SERIAL_MASK) << INDEX_BITS) | <unsigned long long>index
        completion.user_data = user_data
        return user_data

    cdef bint _grow(self) except -1:
        cdef Py_ssize_t old = self._capacity, new = old * 2 if old else 64, i
        if new > <Py_ssize_t>INDEX_MASK + 1:
            return False
        slots = <PyObject **>PyMem_Realloc(self._slots, new * sizeof(PyObject *))
        if slots == NULL:
            raise MemoryError()
        self._slots = slots
        free = <Py_ssize_t *>PyMem_Realloc(self._free, new * sizeof(Py_ssize_t))
        if free == NULL:
            raise MemoryError()
        self._free = free
        for i in range(new - 1, old - 1, -1):   # (the lowest index on top of the stack)
            self._slots[i] = NULL
            self._free[self._free_count] = i
            self._free_count += 1
        self._capacity = new
        return True

    cdef PyObject *_slot(self, unsigned long long user_data):
        # The held completion user_data names, or NULL (a stale or foreign user_data).
        cdef unsigned long long index = user_data & INDEX_MASK
        cdef PyObject *held
        if not user_data & HELD or index >= <unsigned long long>self._capacity:
            return NULL
        held = self._slots[index]
        if held == NULL or (<TransportCompletion>held).user_data != user_data:
            return NULL
        return held

    cdef object take(self, unsigned long long user_data, bint more):
        """The callback of a CQE's operation, out of the table unless ``more``; None if unknown."""
        cdef PyObject *held
        if not user_data & HELD:
            if more:
                return self._table.get(user_data)
            return self._table.pop(user_data, None)
        held = self._slot(user_data)
        if held == NULL:
            return None
        completion = <TransportCompletion>held
        if not more:
            self._vacate(<Py_ssize_t>(user_data & INDEX_MASK))   # ``completion`` keeps its own reference
        return completion

    cdef int _release_all(self) except -1:
        cdef Py_ssize_t i
        for i in range(self._capacity):
            if self._slots[i] != NULL:
                self._vacate(i)
        return 0

    cdef int _vacate(self, Py_ssize_t index) except -1:
        # Empty a taken slot, onto the free stack, and drop the slot's reference.
        cdef PyObject *held = self._slots[index]
        self._slots[index] = NULL
        self._free[self._free_count] = index
        self._free_count += 1
        self._held -= 1
        (<TransportCompletion>held).user_data = 0
        Py_DECREF(<object>held)
        return 0

    # -- The dict's methods, as the Python Proactor calls them -----------------------------

    def __setitem__(self, key, callback):
        cdef unsigned long long user_data = key
        if user_data & HELD:
            raise KeyError(f"user_data {user_data:#x} is a held operation's, set by the table alone")
        self._table[user_data] = callback

    def __getitem__(self, key):
        # (An object, not a typed argument: Cython would give a typed one the
        # sequence slot, whose index is a Py_ssize_t, too small for bit 63.)
        cdef unsigned long long user_data = key
        cdef PyObject *held
        if user_data & HELD:
            held = self._slot(user_data)
            if held == NULL:
                raise KeyError(user_data)
            return <object>held
        return self._table[user_data]

    def __contains__(self, key):
        cdef unsigned long long user_data = key
        if user_data & HELD:
            return self._slot(user_data) != NULL
        return user_data in self._table

    def __len__(self):
        return len(self._table) + self._held

    def get(self, unsigned long long user_data, default=None):
        """The callback of ``user_data``, or ``default``."""
        cdef PyObject *held
        if user_data & HELD:
            held = self._slot(user_data)
            return default if held == NULL else <object>held
        return self._table.get(user_data, default)

    def pop(self, unsigned long long user_data, *default):
        """Take ``user_data``'s entry out and return its callback; ``default`` if given, else KeyError."""
        if user_data in self:
            return self.take(user_data, False)
        if default:
            return default[0]
        raise KeyError(user_data)

    def values(self):
        """A list of the callbacks, the dict's and then the held ones."""
        cdef Py_ssize_t i
        callbacks = list(self._table.values())
        for i in range(self._capacity):
            if self._slots[i] != NULL:
                callbacks.append(<object>self._slots[i])
        return callbacks

    def clear(self):
        """Forget every entry (the Proactor's close, after the ring's: the kernel holds nothing now)."""
        self._table.clear()
        self._release_all()


cdef class ProactorCore:
    """The C half of tinyloop/ring/core.py's CythonProactor: recv, send, accept, cancel and select.

    Not used alone: the Python Proactor (tinyloop/ring/proactor.py) comes
    after it and sets these fields in its ``__init__``; their meaning is
    written there.
    """

    cdef public object _operations   # an Operations (core.py's CythonProactor makes it)
    cdef public object _buffers      # a ProvidedBuffers, made with the ring (the ``ring`` property)
    cdef public object _ids
    cdef public object _ring
    cdef public object _instrument
    cdef public object ready
    cdef public object _to_arm
    cdef public list _events
    cdef public unsigned long long _timer
    cdef public double _timer_deadline
    cdef public bint _timer_completed
    # The ring as last checked, and the thread it was checked in.
    cdef Ring _owned
    cdef unsigned long _owner
    cdef bint _send_prepared   # a send prepared since the last enter (see _select_c)

    cdef Ring _ring_c(self):
        # The ``ring`` property's answer, asked again only when the ring or the thread changed.
        cdef Ring ring = self._owned
        cdef unsigned long thread = PyThread_get_thread_ident()
        if ring is not None and ring is self._ring and self._owner == thread:
            return ring
        ring = self.ring   # made here, or RuntimeError from another thread
        self._owned, self._owner = ring, thread
        return ring

    cdef unsigned long long _submission_c(self, object callback) except 0:
        # A transport's completion is held in the table's slots; with an
        # instrument it goes in the dict, where _observe wraps it.
        cdef Counter ids = self._ids
        cdef unsigned long long user_data
        ids.value += 1
        if (type(callback) is TransportCompletion and self._instrument is None
                and type(self._operations) is Operations):
            user_data = (<Operations>self._operations).hold(<TransportCompletion>callback, ids.value)
            if user_data:
                return user_data
        self._operations[ids.value] = callback
        return ids.value

    def recv(self, int fd, unsigned long long address, unsigned length, callback):
        """Proactor.recv, in C: a receive of at most ``length`` bytes into ``address``."""
        return self._recv_c(fd, address, length, callback)

    cdef unsigned long long _recv_c(self, int fd, unsigned long long address, unsigned length,
                                    object callback) except 0:
        cdef unsigned long long user_data = self._submission_c(callback)
        self._ring_c().prep_recv(fd, address, length, user_data)
        if self._instrument is not None:
            self._observe(user_data, "RECV", fd)
        return user_data

    def recv_provided(self, int fd, callback):
        """Proactor.recv_provided, in C: a receive into a provided buffer the kernel picks."""
        return self._recv_select_c(fd, callback)

    cdef unsigned long long _recv_select_c(self, int fd, object callback) except 0:
        cdef Ring ring = self._ring_c()   # (made here, with its buffers, on first use)
        cdef unsigned long long user_data = self._submission_c(callback)
        ring.prep_recv_select(fd, (<ProvidedBuffers>self._buffers).group, user_data)
        if self._instrument is not None:
            self._observe(user_data, "RECV", fd)
        return user_data

    def send(self, int fd, unsigned long long address, unsigned length, callback):
        """Proactor.send, in C: a send of ``length`` bytes from ``address``."""
        return self._send_c(fd, address, length, callback)

    cdef unsigned long long _send_c(self, int fd, unsigned long long address, unsigned length,
                                    object callback) except 0:
        cdef unsigned long long user_data = self._submission_c(callback)
        self._ring_c().prep_send(fd, address, length, user_data)
        self._send_prepared = True
        if self._instrument is not None:
            self._observe(user_data, "SEND", fd)
        return user_data

    def accept(self, int fd, unsigned long long address, unsigned long long length_address, int flags,
               callback):
        """Proactor.accept, in C: accept4(2) on listener ``fd``, the peer's address into ``address``."""
        cdef unsigned long long user_data = self._submission_c(callback)
        self._ring_c()._prep_accept(fd, address, length_address, flags, user_data)
        if self._instrument is not None:
            self._observe(user_data, "ACCEPT", fd)
        return user_data

    def cancel(self, unsigned long long user_data):
        """Proactor.cancel, in C: ask the kernel to cancel operation ``user_data`` (a request, not a fact)."""
        if user_data in self._operations:
            self._ring_c().prep_cancel(user_data, _NOBODY)
            if self._instrument is not None:
                self._observe(_NOBODY, "ASYNC_CANCEL", -1, user_data)

    def select(self, timeout=None):
        """Proactor.select, in C: submit, wait at most ``timeout`` seconds, run the completions."""
        if timeout is None:
            return self._select_c(False, 0.0)
        return self._select_c(True, timeout)

    cdef list _select_c(self, bint bounded, double timeout):
        cdef Ring ring = self._ring_c()
        cdef int submitted
        cdef bint interrupted
        cdef list events
        cdef object instrument
        cdef bint send_prepared = self._send_prepared
        self._send_prepared = False   # (every way out of here enters)
        if self._to_arm:
            self._arm_polls()
        if self._instrument is None:
            # Discussion: two enters the Python select makes that wait for
            # nothing.  With work ready (a zero timeout) it submits a NOP and
            # waits for its completion; and after a send, the send has most
            # often completed inside the enter that submitted it (the kernel
            # tries it at once), so that enter returns at once too.  Each
            # releases and takes back the GIL, about 500 instructions, for a
            # wait that does not happen.  Here both are an enter that does
            # not wait and keeps the GIL; after a send, if nothing came of
            # it, the waiting enter follows (an enter more, only then).  With
            # an instrument, the Python select's enters, as it records them.
            if bounded and timeout <= 0:
                ring.submit_and_get_events()
                return self._complete_c(ring)
            if send_prepared:
                ring.submit_and_get_events()
                self._timer_completed = False
                events = self._complete_c(ring)
                if events or self._timer_completed or self.ready is None or _length(self.ready):
                    return events
        if bounded:
            if timeout <= 0:
                ring._prep_nop(0)
                if self._instrument is not None:
                    self._observe(0, "NOP", -1)
            elif not (self._timer and self._timer_deadline <= _monotonic() + timeout + TIMER_SLACK):
                self._arm_timer(timeout)   # (its own test again, then a new TIMEOUT operation)
        self._timer_completed = False
        while True:
            instrument = self._instrument
            if instrument is not None:
                instrument.before_enter()
            submitted = 0
            interrupted = False
            # Discussion: a signal's Python handler (Ctrl-C's) runs when
            # Python code runs, or in this wait, which runs it after EINTR.
            # A signal that came while the C iteration ran callbacks all in
            # C has neither: it would wait for the next completion, for ever
            # on an idle loop.  Part II's run_forever ran Python code after
            # every iteration; the C one does not (LoopCore.run_once), so
            # the handler runs here, before a wait and not after every
            # iteration, where a busy loop would pay for the test each time.
            PyErr_CheckSignals()
            try:
                submitted = ring.submit_and_wait(1)
            except InterruptedError:
                interrupted = True
            if instrument is not None:
                instrument.after_enter(submitted)
            events = self._complete_c(ring)
            if (events or interrupted or self._timer_completed or self.ready is None
                    or _length(self.ready) or (bounded and timeout <= 0)):
                return events

    cdef list _complete_c(self, Ring ring):
        # Run the completions posted; the events they gave (poll callbacks append to it).
        cdef list events = []
        self._events = events
        ring.complete(self._operations)
        return events


# asyncio's BaseTransport, at the root of Part III's transports, is a Python
# class with ``__slots__ = ("_extra",)``: its instances are this struct.
cdef extern from *:
    """
    typedef struct { PyObject_HEAD PyObject *_extra; } tinyloop_BaseTransportObject;

    /* StreamCore's allocation, traversal, clearing and deallocation, by
       hand (see StreamCore's Discussion).  Its object fields are one run
       of pointers, tinyloop_objects_count of them from byte
       tinyloop_objects_at; each of these functions also does, for
       BaseTransport's _extra, what BaseTransport's own would. */
    static Py_ssize_t tinyloop_objects_at, tinyloop_objects_count;
    static newfunc tinyloop_base_new;
    static PyObject *tinyloop_no_args;

    #define TINYLOOP_OBJECTS(self) ((PyObject **)((char *)(self) + tinyloop_objects_at))
    #define TINYLOOP_EXTRA(self) (((tinyloop_BaseTransportObject *)(self))->_extra)

    static PyObject *tinyloop_stream_new(PyTypeObject *kind, PyObject *args, PyObject *kwds) {
        /* object's allocation, as BaseTransport's; it refuses arguments, which __init__ takes */
        PyObject *self = tinyloop_base_new(kind, tinyloop_no_args, NULL);
        Py_ssize_t i;
        if (self == NULL) return NULL;
        for (i = 0; i < tinyloop_objects_count; i++) {
            Py_INCREF(Py_None);
            TINYLOOP_OBJECTS(self)[i] = Py_None;   /* Cython's code reads them, never NULL */
        }
        return self;
    }

    static int tinyloop_stream_traverse(PyObject *self, visitproc visit, void *arg) {
        Py_ssize_t i;
        Py_VISIT(TINYLOOP_EXTRA(self));
        for (i = 0; i < tinyloop_objects_count; i++) Py_VISIT(TINYLOOP_OBJECTS(self)[i]);
        return 0;
    }

    static int tinyloop_stream_clear(PyObject *self) {
        Py_ssize_t i;
        PyObject *old;
        Py_CLEAR(TINYLOOP_EXTRA(self));
        for (i = 0; i < tinyloop_objects_count; i++) {
            old = TINYLOOP_OBJECTS(self)[i];
            Py_INCREF(Py_None);
            TINYLOOP_OBJECTS(self)[i] = Py_None;
            Py_XDECREF(old);
        }
        return 0;
    }

    static void tinyloop_stream_dealloc(PyObject *self) {
        /* The subclass's subtype_dealloc has run its finalizer and cleared
           its __dict__ and weak references, and calls this for the rest. */
        Py_ssize_t i;
        PyObject_GC_UnTrack(self);
        Py_CLEAR(TINYLOOP_EXTRA(self));
        for (i = 0; i < tinyloop_objects_count; i++) Py_CLEAR(TINYLOOP_OBJECTS(self)[i]);
        Py_TYPE(self)->tp_free(self);
    }

    static int tinyloop_own_object_slots(PyObject *type, Py_ssize_t at, Py_ssize_t count) {
        PyTypeObject *kind = (PyTypeObject *)type;
        tinyloop_no_args = PyTuple_New(0);
        if (tinyloop_no_args == NULL) return -1;
        tinyloop_objects_at = at;
        tinyloop_objects_count = count;
        tinyloop_base_new = kind->tp_base->tp_new;
        kind->tp_new = tinyloop_stream_new;
        kind->tp_dealloc = tinyloop_stream_dealloc;
        kind->tp_traverse = tinyloop_stream_traverse;
        kind->tp_clear = tinyloop_stream_clear;
        return 0;
    }
    """
    ctypedef struct tinyloop_BaseTransportObject:
        pass
    int tinyloop_own_object_slots(object kind, Py_ssize_t at, Py_ssize_t count) except -1
    # Where StreamCore's object fields begin and end (C's offsetof, on Cython's struct).
    Py_ssize_t _OBJECTS_AT "offsetof(struct __pyx_obj_8tinyloop_4ring_6_uring_StreamCore, _loop)"
    Py_ssize_t _OBJECTS_LAST "offsetof(struct __pyx_obj_8tinyloop_4ring_6_uring_StreamCore, _data_received)"

cdef extern from *:
    ctypedef class asyncio.transports.BaseTransport [object tinyloop_BaseTransportObject, check_size error]:
        pass


cdef class StreamCore(BaseTransport):
    """The C half of tinyloop.ring.loop's CythonSocketTransport: a request's path through it.

    Not used alone: RingSocketTransport and Part III's transport come after
    it and set these fields in their ``__init__``s (their meanings are
    written in tinyloop/ring/loop.py and tinyloop/aio/selector_events.py).

    Discussion: how can a C class sit under asyncio's BaseTransport?  Every
    Part III transport derives from BaseTransport, a Python class with
    ``__slots__``, and CPython refuses a class with two bases that each add
    to the instance's layout; a C class that extends BaseTransport's layout
    (``_extra``, then its own fields) is a base both chains agree on.  Its
    fields are what a request reads, so reading one is a load from the
    object, not a dictionary lookup.  The cost is in memory management:
    Cython's generated traversal, clearing and deallocation would call
    BaseTransport's after their own work, and those (CPython's
    subtype_traverse, subtype_clear and subtype_dealloc, made for Python
    classes) start again from the instance's type, which leads back here:
    a recursion, not a chain; and its allocation would pass the
    constructor's arguments on to BaseTransport's, object's, which refuses
    them (``__init__`` takes them).  So the four are written by hand, above
    (tinyloop_own_object_slots): they handle ``_extra`` as BaseTransport's
    would, and this class's object fields, which must stay one run from
    ``_loop`` to ``_data_received`` (the module checks, when it is imported).
    A Python subclass's ``__dict__`` and weak references are CPython's to
    handle, before it calls these.
    """

    # Part III's (tinyloop/aio/selector_events.py, tinyloop/aio/transports.py);
    # the object fields first, one run of pointers (see the Discussion)
    cdef public object _loop, _protocol, _sock, _buffer, _empty_waiter
    # RingSocketTransport's (tinyloop/ring/loop.py; _on_recv and _on_send: CythonSocketTransport's)
    cdef public object _proactor, _ready, _pending, _sending, _recv_data
    cdef public object _on_recv, _on_send, _recv_handle, _send_handle
    # Its own: the protocol's data_received, bound, as last looked up (see
    # _data_received_c; CythonSocketTransport drops it with the protocol)
    cdef public object _data_received
    # Part III's numbers
    cdef public int _sock_fd, _conn_lost
    cdef public Py_ssize_t _buffer_size, _high_water
    cdef public bint _closing, _paused, _eof, _protocol_paused
    # RingSocketTransport's numbers
    cdef public unsigned long long _recv_op, _send_op
    cdef public int _recv_res, _send_res
    cdef public Py_ssize_t _send_offset
    cdef public bint _at_eof, _buffered

    def is_closing(self):
        """Part III's is_closing, in C (a streams server's drain() asks it for every write)."""
        return self._closing

    # -- Reading -------------------------------------------------------------------------

    def _start_reading(self):
        _start_reading_c(self)

    def _recv_done(self):
        _recv_done_c(self)

    def _deliver(self, data):
        _deliver_c(self, data)

    # -- Writing -------------------------------------------------------------------------

    def write(self, data):
        """RingSocketTransport.write, in C: queue ``data``; submit a send if none is outstanding."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
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
        _write_buffer(self).append(data if isinstance(data, bytes) else bytes(data))
        self._buffer_size += len(data)
        if self._sending is None:
            _send_next_c(self)
        if not self._protocol_paused and self._buffer_size > self._high_water:
            self._maybe_pause_protocol()

    def _send_next(self):
        _send_next_c(self)

    def _send_from(self, data, Py_ssize_t offset):
        _send_from_c(self, data, offset)


# The fifteen object fields declared above, from _loop to _data_received.
if _OBJECTS_LAST - _OBJECTS_AT != 14 * sizeof(PyObject *):
    raise ImportError("StreamCore's object fields are not one run of fifteen pointers")
tinyloop_own_object_slots(StreamCore, _OBJECTS_AT, 15)


cdef class TransportCompletion:
    """The completion callback of a StreamCore's receive or send, which Ring.complete runs in C.

    Callable as every completion callback is, ``completion(res, flags)``
    (an observed operation's wrapper calls it so: Proactor._observe), but
    Ring.complete calls :meth:`complete_c` instead, with no Python call.
    Each transport has one for its receives and one for its sends
    (``_on_recv``, ``_on_send``), reused; each holds the transport from
    the submission to the completion only, which is as long as the kernel
    may use the transport's buffer, and no longer, so an idle transport
    and its completions make no reference cycle.
    """

    cdef StreamCore transport
    cdef readonly bint sending
    cdef readonly unsigned long long user_data   # while held in an Operations' slot, else 0

    def __cinit__(self, bint sending):
        self.sending = sending

    def __call__(self, int res, unsigned flags):
        self.complete_c(res, flags)

    cdef int complete_c(self, int res, unsigned flags) except -1:
        cdef StreamCore transport = self.transport
        if transport is None:
            return 0   # (none outstanding: a completion never comes twice)
        self.transport = None
        if self.sending:
            _send_completed_c(transport, res)
        else:
            _recv_completed_c(transport, res, flags)
        return 0


cdef int _recv_completed_c(StreamCore self, int res, unsigned flags) except -1:
    # In the proactor's wait (step 2): the data copied out of the buffer
    # the kernel took, which goes straight back to it, whoever is left to
    # tell; then the handle queued (None once connection_lost has run).
    self._recv_op = 0
    self._recv_res = res
    if flags & IORING_CQE_F_BUFFER:
        self._recv_data = (<ProvidedBuffers>(<ProactorCore>self._proactor)._buffers).take_c(
            flags >> IORING_CQE_BUFFER_SHIFT, res)
    handle = self._recv_handle
    if handle is not None:
        tinyloop_append(self._ready, handle)
    return 0


cdef extern from "Python.h":
    bint PyList_Check(object o)
    int PyList_SetSlice(object list, Py_ssize_t low, Py_ssize_t high, PyObject *items) except -1


cdef inline list _write_buffer(StreamCore transport):
    # The transport's write buffer, Part III's _WriteBuffer: a subclass of
    # list, which Cython's list type refuses (it takes exact lists), so a
    # checked cast; then its appends, lengths and items are C list calls.
    buffer = transport._buffer
    if not PyList_Check(buffer):
        raise TypeError(f"a transport's write buffer is a list, not {type(buffer).__name__}")
    return <list>buffer


cdef inline int _clear(list buffer) except -1:
    # buffer.clear(), the C way (the method call would look ``clear`` up by name).
    return PyList_SetSlice(buffer, 0, len(buffer), NULL)


cdef int _send_completed_c(StreamCore self, int res) except -1:
    data = self._sending
    cdef list buffer = _write_buffer(self)
    if (res == len(data) - self._send_offset and len(buffer) == 1
            and not (self._protocol_paused or self._closing or self._eof or self._conn_lost)
            and self._empty_waiter is None):
        # All of it sent, nothing queued behind it, nobody to tell (see RingSocketTransport).
        self._sending = None
        _clear(buffer)
        self._buffer_size -= res
        instrument = _instrument_of(self._loop)
        if instrument is not None:
            instrument.transport_wrote(self, res, 1, self._buffer_size)
        return 0
    self._send_res = res
    handle = self._send_handle
    if handle is not None:
        tinyloop_append(self._ready, handle)
    return 0


cdef inline object _instrument_of(object loop):
    # The loop's instrument: a field of ring.Loop's LoopCore, read as a field.
    if isinstance(loop, LoopCore):
        return (<LoopCore>loop)._instrument
    return loop._instrument


cdef object _completion(StreamCore transport, object completion):
    # The transport's TransportCompletion, holding the transport until it runs.
    (<TransportCompletion>completion).transport = transport
    return completion


cdef int _start_reading_c(StreamCore self) except -1:
    if self._paused or self._closing or self._at_eof:
        return 0
    pending = self._pending
    if pending is not None:
        self._pending = None
        self._loop.call_soon(self._deliver, pending)
    elif not self._recv_op and self._sock is not None:
        self._recv_op = (<ProactorCore>self._proactor)._recv_select_c(
            self._sock_fd, _completion(self, self._on_recv))
    return 0


cdef int _recv_done_c(StreamCore self) except -1:
    cdef int res = self._recv_res
    data = self._recv_data
    self._recv_data = None
    if self._closing or self._conn_lost:
        return 0
    if res == -ENOBUFS:
        _start_reading_c(self)   # (see RingSocketTransport._recv_done)
        return 0
    if res < 0:
        self._fatal_error(_os_error(res), "Fatal read error on socket transport")
        return 0
    _deliver_c(self, data if res else b"")
    return 0


cdef int _deliver_c(StreamCore self, object data) except -1:
    if self._conn_lost:
        return 0
    if self._paused:
        self._pending = data
        return 0
    instrument = _instrument_of(self._loop)
    if instrument is not None:
        instrument.transport_read(self, len(data), 1)
    if not data:
        self._at_eof = True
        self._read_ready__on_eof()
        return 0
    try:
        if self._buffered:
            self._deliver_into_buffers(data)
        else:
            _data_received_c(self, data)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")
        return 0
    _start_reading_c(self)
    return 0


cdef inline int _data_received_c(StreamCore self, object data) except -1:
    # self._protocol.data_received(data), its bound method looked up once
    # for each protocol (set_protocol may change it), as Part IV's transport
    # looks it up once (tinyloop/uv/tcp.pyx) and uvloop's does: a lookup by
    # name, through the protocol's class, costs about 200 instructions.
    protocol = self._protocol
    method = self._data_received
    if not (PyMethod_Check(method) and <object>PyMethod_GET_SELF(method) is protocol):
        method = protocol.data_received
        self._data_received = method
    method(data)
    return 0


cdef int _send_next_c(StreamCore self) except -1:
    cdef list buffer = _write_buffer(self)
    if len(buffer) > 1:
        joined = b"".join(buffer)
        _clear(buffer)
        buffer.append(joined)
    _send_from_c(self, buffer[0], 0)
    return 0


cdef int _send_from_c(StreamCore self, object data, Py_ssize_t offset) except -1:
    cdef Py_ssize_t length = len(data) - offset
    if length > 1 << 30:
        length = 1 << 30   # one send at a time; the rest goes on from where it stopped
    self._sending = data
    self._send_offset = offset
    self._send_op = (<ProactorCore>self._proactor)._send_c(
        self._sock_fd, <size_t>PyBytes_AS_STRING(data) + offset, <unsigned>length,
        _completion(self, self._on_send))
    return 0


# Part III's Handle keeps its fields in __slots__: C fields of the instance,
# at offsets its class's member descriptors know (CPython's member_get reads
# them there).  The iteration and call_soon read and write a Handle's fields
# at those offsets, as member_get and member_set would, without the name
# lookup through the class's MRO and the descriptor call that each
# ``handle._callback`` costs from C: a handle's life is nine such accesses.
cdef extern from *:
    """
    #include <structmember.h>

    /* The offset of an object slot in its instances, from its member
       descriptor; -1 and TypeError for anything else. */
    static Py_ssize_t tinyloop_slot_offset(PyObject *descriptor) {
        PyMemberDef *member;
        if (!PyObject_TypeCheck(descriptor, &PyMemberDescr_Type)
                || ((PyMemberDescrObject *)descriptor)->d_member->type != T_OBJECT_EX) {
            PyErr_SetString(PyExc_TypeError, "not the member descriptor of an object in __slots__");
            return -1;
        }
        member = ((PyMemberDescrObject *)descriptor)->d_member;
        return member->offset;
    }

    /* The slot's object, borrowed; NULL if it was never set (no error set). */
    static inline PyObject *tinyloop_slot(PyObject *self, Py_ssize_t offset) {
        return *(PyObject **)((char *)self + offset);
    }

    /* Set the slot to ``value``, releasing what it held (member_set's work). */
    static inline void tinyloop_set_slot(PyObject *self, Py_ssize_t offset, PyObject *value) {
        PyObject **slot = (PyObject **)((char *)self + offset);
        PyObject *old = *slot;
        Py_INCREF(value);
        *slot = value;
        Py_XDECREF(old);
    }

    /* True if the caller's is the one reference to ``self``, and no weak
       reference points to it: nothing else can see it again. */
    static inline int tinyloop_only_ours(PyObject *self) {
        Py_ssize_t at = Py_TYPE(self)->tp_weaklistoffset;
        return Py_REFCNT(self) == 1 && (at <= 0 || *(PyObject **)((char *)self + at) == NULL);
    }

    /* A new instance of the Python class ``kind``, its slots empty: kind.__new__(kind). */
    static PyObject *tinyloop_new_instance(PyObject *kind) {
        PyObject *no_args = PyTuple_New(0), *self;
        if (no_args == NULL) return NULL;
        self = ((PyTypeObject *)kind)->tp_new((PyTypeObject *)kind, no_args, NULL);
        Py_DECREF(no_args);
        return self;
    }
    """
    Py_ssize_t tinyloop_slot_offset(object descriptor) except -1
    PyObject *tinyloop_slot(object self, Py_ssize_t offset)
    void tinyloop_set_slot(object self, Py_ssize_t offset, object value)
    object tinyloop_new_instance(object kind)
    bint tinyloop_only_ours(object self)
    PyObject *Py_True

cdef Py_ssize_t _CONTEXT = tinyloop_slot_offset(_AioHandle._context)
cdef Py_ssize_t _CALLBACK = tinyloop_slot_offset(_AioHandle._callback)
cdef Py_ssize_t _ARGS = tinyloop_slot_offset(_AioHandle._args)
cdef Py_ssize_t _CANCELLED = tinyloop_slot_offset(_AioHandle._cancelled)
cdef Py_ssize_t _LOOP = tinyloop_slot_offset(_AioHandle._loop)
cdef Py_ssize_t _REPR = tinyloop_slot_offset(_AioHandle._repr)


# How many emptied handles a loop keeps for call_soon (LoopCore._keep_spare).
cdef enum:
    SPARE_HANDLES = 64

# _run_handle's kinds of handle.
cdef enum:
    TIMER, HANDLE, RECEIVE


cdef inline int _run_handle(object handle, int kind) except -1:
    # tinyloop.aio.events.Handle._run, without its Python frame, and in its
    # context without the call to Context.run.  ``kind``: TIMER, a
    # TimerHandle, whose fields are read by name (its _context is a slot of
    # its own class); HANDLE, a Handle, read at its slots' offsets; RECEIVE,
    # a TransportHandle, whose callback is StreamCore._recv_done and its one
    # argument the transport, so the call is a C one.
    cdef PyObject *context_slot
    cdef PyObject *callback_slot
    cdef PyObject *args_slot
    if kind == TIMER:
        context, callback, args = handle._context, handle._callback, handle._args
    else:
        context_slot = tinyloop_slot(handle, _CONTEXT)
        callback_slot = tinyloop_slot(handle, _CALLBACK)
        args_slot = tinyloop_slot(handle, _ARGS)
        if context_slot == NULL or callback_slot == NULL or args_slot == NULL:
            handle._run()   # (a field never set: Part III's own raises AttributeError)
            return 0
        context, callback, args = <object>context_slot, <object>callback_slot, <object>args_slot
    PyContext_Enter(context)
    try:
        if kind == RECEIVE:
            _recv_done_c(<StreamCore>(<tuple>args)[0])
        elif args:
            callback(*args)
        else:
            callback()
    except (SystemExit, KeyboardInterrupt):
        PyContext_Exit(context)
        raise
    except BaseException as exc:
        PyContext_Exit(context)
        handle._report(exc)   # (outside the context, as Context.run leaves it)
        return 0
    PyContext_Exit(context)
    return 0


class TransportHandle(_AioHandle):
    """A CythonSocketTransport's receive handle, reused for every receive: Part III's Handle.

    Made as ``TransportHandle(StreamCore._recv_done, (transport,), loop,
    None)``, it runs as any Handle does; LoopCore's iteration knows its
    class and makes the call in C (_run_handle).
    """

    __slots__ = ()


cdef class LoopCore:
    """The C half of tinyloop.ring.loop.Loop: Part II's iteration, and the fields it reads.

    Not used alone: Loop puts it in front of Part III's loop, whose
    ``__init__``s set these fields (Part II's meanings: tinyloop/callbacks/loop.py;
    ``_proactor``: tinyloop/ring/loop.py), as Part IV's UVLoop is put in front.
    """

    cdef public object _ready, _scheduled, _instrument, _clock, _proactor
    cdef public bint _stopping, _debug, _closed
    # Handles that ran and that nobody else holds, emptied, for call_soon to reuse
    cdef PyObject *_spare_handles[SPARE_HANDLES]
    cdef readonly int _spare_count

    def __cinit__(self, *args, **kwargs):
        # Closed until Part II's __init__ says otherwise: a loop whose
        # __init__ raised (io_uring refused) is one Part III's __del__ leaves
        # alone, as it does when it finds no _closed at all.
        self._closed = True

    def __dealloc__(self):
        while self._spare_count:
            self._spare_count -= 1
            Py_DECREF(<object>self._spare_handles[self._spare_count])

    cdef int _keep_spare(self, object handle) except -1:
        # Discussion: Part IV's handles are C structs on a free list; Part
        # III's are Python objects, and a streams server makes and frees one
        # or two per read (a future's callbacks, a task's step): about 350
        # instructions each, in CPython's allocation, GC tracking and
        # deallocation.  A handle that has run, and that nothing else holds
        # (one reference, ours, and no weak one), can never be seen again:
        # emptied, so that it holds nothing (the loop neither: no cycle the
        # collector cannot see), it is kept here, and call_soon sets its six
        # fields again instead of making a new one.
        tinyloop_set_slot(handle, _CONTEXT, None)
        tinyloop_set_slot(handle, _CALLBACK, None)
        tinyloop_set_slot(handle, _ARGS, None)
        tinyloop_set_slot(handle, _LOOP, None)
        tinyloop_set_slot(handle, _REPR, None)
        Py_INCREF(handle)
        self._spare_handles[self._spare_count] = <PyObject *>handle
        self._spare_count += 1
        return 0

    def run_once(self):
        """Part II's iterations (tinyloop/callbacks/loop.py), in C, until :meth:`stop` is asked for.

        Part II's run_forever calls run_once, then reads ``_stopping``,
        until it is set: Python code for every iteration, a name lookup
        and a call among them (about 500 instructions, more than any one of
        the four steps here).  So, as Part IV's run_once does
        (tinyloop/uv/_loop.pyx), one call runs the iterations up to that
        point itself, and run_forever's Python loop turns once a run.  It
        returns after the iteration in which ``_stopping`` was set, or in
        which debug mode or an instrument was turned on: run_forever then
        calls it again, and Part II's own iteration runs, as it does
        from the start in debug mode, with an instrument, and on the
        ``python`` core, whose proactor is not a ProactorCore.  Raises what
        a callback or a signal handler let through (KeyboardInterrupt,
        SystemExit; ProactorCore's select says where the handlers run).
        """
        if not self._in_c():
            return _Reactor.run_once(self)
        while True:
            self._iteration_c()
            if self._stopping or not self._in_c():
                return

    cdef inline bint _in_c(self):
        # The C iteration runs unless Part II's must: debug mode, an instrument, the python core.
        return not self._debug and self._instrument is None and isinstance(self._proactor, ProactorCore)

    cdef int _iteration_c(self) except -1:
        # One iteration, Part II's four steps.
        cdef object ready, scheduled, handle, kind
        cdef bint bounded = True
        cdef double timeout = 0.0, delay
        cdef Py_ssize_t todo
        cdef list events
        # 1. The timeout: zero if work is ready, else until the nearest timer.
        scheduled = self._scheduled
        if _length(scheduled):
            self._clean_timer_heap()
            scheduled = self._scheduled
        ready = self._ready
        if _length(ready) or self._stopping:
            timeout = 0.0
        elif not _length(scheduled):
            bounded = False
        else:
            delay = scheduled[0]._when - self._clock()
            timeout = min(max(0.0, delay), MAXIMUM_WAIT)
        # 2. The wait.
        events = (<ProactorCore>self._proactor)._select_c(bounded, timeout)
        # 3. Ready descriptors, then due timers.
        if events:
            self._process_events(events)
        if _length(self._scheduled):
            self._move_due_timers()
        # 4. The ready queue, as tinyloop.aio runs it.
        todo = _length(ready)
        while todo > 0:
            todo -= 1
            handle = tinyloop_popleft(ready)
            kind = type(handle)
            if kind is _AioHandle or kind is TransportHandle:
                if tinyloop_slot(handle, _CANCELLED) == <PyObject *>Py_True:
                    continue
                _run_handle(handle, RECEIVE if kind is TransportHandle else HANDLE)
                if (kind is _AioHandle and self._spare_count < SPARE_HANDLES
                        and tinyloop_only_ours(handle)):
                    self._keep_spare(handle)
            elif handle._cancelled:
                continue
            elif kind is _AioTimerHandle:
                _run_handle(handle, TIMER)
            else:
                handle._run()
        return 0

    # -- What a streams server calls for every read (as tinyloop/uv/_loop.pyx has them) ------

    def call_soon(self, callback, *args, context=None):
        """Part III's call_soon (tinyloop/aio/base_events.py), in C: a Handle on the ready queue.

        Returns the Handle.  A closed loop, and debug mode (its checks and
        its DebugHandle), go to Part III's method, which raises what it raises.
        """
        if self._closed or self._debug:
            return _aio_call_soon(self, callback, *args, context=context)
        # Part III's Handle, its __init__'s six fields set here, at their
        # slots (see _run_handle), without its Python frame; a spare one if
        # there is one (see _keep_spare).
        cdef PyObject *spare
        if self._spare_count:
            self._spare_count -= 1
            spare = self._spare_handles[self._spare_count]
            handle = <object>spare
            Py_DECREF(handle)   # (the spare list's reference; ``handle`` holds its own)
        else:
            handle = tinyloop_new_instance(_AioHandle)
        tinyloop_set_slot(handle, _CONTEXT, PyContext_CopyCurrent() if context is None else context)
        tinyloop_set_slot(handle, _CALLBACK, callback)
        tinyloop_set_slot(handle, _ARGS, args)
        tinyloop_set_slot(handle, _CANCELLED, False)
        tinyloop_set_slot(handle, _LOOP, self)
        tinyloop_set_slot(handle, _REPR, None)
        tinyloop_append(self._ready, handle)
        return handle

    def create_future(self):
        """A new ``asyncio.Future`` bound to this loop, as Part III's create_future.

        (In debug mode Part III's Python method makes it, so that the
        future's _source_traceback ends in the same frame as asyncio's.)
        """
        if self._debug:
            return _aio_create_future(self)
        return _Future(loop=self)

    def get_debug(self):
        """True in debug mode (asyncio's Future asks, as it starts: Part II's method, in C)."""
        return self._debug
