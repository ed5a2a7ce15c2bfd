# cython: language_level=3
"""tinyloop.ring's Cython core: the ring, owned through liburing, and the completion loop in C.

tinyloop/raw/uring.py drives io_uring from Python: SQEs packed with
``struct``, io_uring_enter(2) called through ``ctypes``, CQEs unpacked one
tuple at a time by a generator.  That is the chapter's lesson, and it is
what the pure-Python core of tinyloop.ring runs on.  This file is the same
ring in C, through liburing, for the loop's hot paths: :class:`Ring` offers
the methods tinyloop.ring.proactor.Proactor calls on a ring (``prep``,
``prep_recv``, ``prep_send``, ``prep_cancel``, ``submit_and_wait``,
``close``) with the same arguments and results, and two more:
:meth:`Ring.complete`, the Proactor's completion loop written in C, and
:meth:`Ring.submit_and_get_events`, an enter that does not wait, which the
C select (fast.pyx) uses where the Python one submits a NOP to wait for.
tinyloop/ring/core.py's CythonProactor is the Proactor with this ring and
that loop; the request's path around them (the proactor's select, the
iteration, the transport) is in C too, in fast.pyx, included at the end.

    tinyloop.raw.uring.Ring (Python)          this Ring (C, liburing)
    ---------------------------------------   ------------------------------------------
    io_uring_setup(2) by ctypes, three mmaps  io_uring_queue_init_params(3)
    prep: struct.pack_into into the SQE slot  io_uring_get_sqe(3) + io_uring_prep_*(3)
    submit_and_wait: syscall(2) by ctypes,    io_uring_submit_and_wait(3): the same one
      GIL released by ctypes                    io_uring_enter(2), GIL released here
    completions(): a generator of tuples;     complete(operations): reads each CQE, hands
      the Proactor's Python loop calls back     its slot back, pops the callback from the
                                                table and calls it, all in one C loop

Rules this file keeps:
  * Same flags as the Python ring: IORING_SETUP_SINGLE_ISSUER and
    IORING_SETUP_DEFER_TASKRUN where the kernel has them (6.1), a CQ four
    times the SQ, and IORING_FEAT_NODROP required.  So both cores run the
    same kernel paths and differ only in the instructions around them.
  * Nothing here owns a buffer or a callback.  The Proactor's table
    (user_data -> completion callback) keeps each callback, and through it
    the object that holds the buffer, until the operation's final CQE;
    :meth:`Ring.complete` is what removes the entry, as the Python loop
    does.  An address passed in is a Python buffer's, pinned by its owner.
  * After every wait, the Python signal handlers due run before the call
    returns (PyErr_CheckSignals), and EINTR is raised as InterruptedError
    for the Proactor to swallow, as tinyloop/raw/uring.py does.
  * One io_uring_enter per wait.  Discussion: liburing's
    io_uring_submit_and_wait_timeout(3) could bound a wait without a
    timer SQE, but it loops around the system call: given no timeout (an
    idle loop), an enter that submitted SQEs and was cut short by a
    signal returns their count, not EINTR, and liburing (2.3) enters
    again to wait, so a Python handler (Ctrl-C's) would not run until
    some completion came.  So the wait is io_uring_submit_and_wait(3),
    one enter, and its bound stays the Proactor's timer operation.

Sources: liburing's manual pages (io_uring_queue_init_params(3),
io_uring_get_sqe(3), io_uring_prep_recv(3), io_uring_submit_and_wait(3),
io_uring_cq_advance(3)); io_uring_enter(2); Python's C API, "Signal
handling" (PyErr_CheckSignals).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EBUSY, EINVAL, ENOBUFS
from libc.string cimport memset
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, PROT_READ, PROT_WRITE, mmap, munmap

from tinyloop.ring.liburing cimport *

import errno
import os

cdef extern from "sys/socket.h":
    enum:
        MSG_NOSIGNAL


def bytes_address(bytes data not None):
    """The address of ``data``'s first byte, an int; the caller keeps ``data`` alive.

    What tinyloop.raw.uring.bytes_address finds through ctypes, read from
    the bytes object itself (PyBytes_AS_STRING).  TypeError for anything
    but bytes.
    """
    return <size_t>PyBytes_AS_STRING(data)


cdef class Ring:
    """One io_uring instance through liburing, with tinyloop.raw.uring.Ring's submission methods.

    ``entries`` is the submission queue's size (the kernel rounds it up to
    a power of two); the completion queue gets four times as many.  Raises
    OSError from io_uring_setup(2) where io_uring is missing or refused,
    and ENOTSUP on a kernel that may drop completions (before 5.5).
    Every method but :meth:`close` raises ValueError once the ring is closed.

    Counters, for tests and figures: ``enters`` (calls that entered the
    kernel or may have), ``submitted`` (SQEs the kernel took), ``completed``
    (CQEs reaped).
    """

    cdef io_uring ring
    cdef bint opened
    cdef readonly unsigned sq_entries, cq_entries, flags, features
    cdef readonly unsigned long long enters, submitted, completed

    def __cinit__(self, unsigned entries=256):
        cdef io_uring_params params
        cdef unsigned setups[2]
        cdef int result = 0, i
        setups[0] = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
        setups[1] = IORING_SETUP_CQSIZE   # a kernel before 6.1 refuses the other two with EINVAL
        for i in range(2):
            memset(&params, 0, sizeof(params))
            params.flags = setups[i]
            params.cq_entries = 4 * entries
            result = io_uring_queue_init_params(entries, &self.ring, &params)
            if result != -EINVAL:
                break
        if result < 0:
            raise OSError(-result, os.strerror(-result))
        self.opened = True
        if not params.features & IORING_FEAT_NODROP:
            self.close()
            raise OSError(errno.ENOTSUP, "this kernel's io_uring may drop completions (no IORING_FEAT_NODROP, 5.5)")
        self.sq_entries, self.cq_entries = params.sq_entries, params.cq_entries
        self.flags, self.features = params.flags, params.features

    def __dealloc__(self):
        if self.opened:
            io_uring_queue_exit(&self.ring)

    # --- the submission queue -------------------------------------------------------------

    cdef io_uring_sqe *_sqe(self) except NULL:
        """The next free SQE; when every slot is taken, what is queued is submitted first."""
        cdef io_uring_sqe *sqe
        if not self.opened:
            raise ValueError("the ring is closed")
        sqe = io_uring_get_sqe(&self.ring)
        if sqe == NULL:
            self.submit_and_wait(0)
            sqe = io_uring_get_sqe(&self.ring)
            if sqe == NULL:  # the kernel took none (-EBUSY: its CQ is full, NODROP)
                raise OSError(EBUSY, "the submission queue is full and the kernel takes no more")
        return sqe

    def prep(self, int opcode, int fd, *, unsigned long long addr=0, unsigned length=0,
             unsigned long long offset=0, unsigned op_flags=0, unsigned long long user_data=0,
             unsigned char flags=0, unsigned short ioprio=0, unsigned short buf_group=0):
        """Prepare one SQE from its fields, as tinyloop.raw.uring.Ring.prep does.

        The arguments are the SQE's fields (io_uring_enter(2)); each opcode
        the Proactor uses goes through its liburing helper, which puts
        ``offset`` and ``op_flags`` where that opcode reads them (the
        accept's socklen_t address, the poll mask, the timeout's count);
        any other opcode is written field by field (io_uring_prep_rw).
        """
        cdef io_uring_sqe *sqe = self._sqe()
        cdef void *address = <void *><size_t>addr
        if opcode == IORING_OP_NOP:
            io_uring_prep_nop(sqe)
        elif opcode == IORING_OP_POLL_ADD:
            io_uring_prep_poll_add(sqe, fd, op_flags)
        elif opcode == IORING_OP_TIMEOUT:
            io_uring_prep_timeout(sqe, address, <unsigned>offset, op_flags)
        elif opcode == IORING_OP_ACCEPT:
            io_uring_prep_accept(sqe, fd, address, <void *><size_t>offset, op_flags)
        elif opcode == IORING_OP_CONNECT:
            io_uring_prep_connect(sqe, fd, address, <unsigned>offset)
        elif opcode == IORING_OP_ASYNC_CANCEL:
            io_uring_prep_cancel64(sqe, addr, op_flags)
        elif opcode == IORING_OP_CLOSE:
            io_uring_prep_close(sqe, fd)
        elif opcode == IORING_OP_RECV:
            io_uring_prep_recv(sqe, fd, address, length, op_flags)
        elif opcode == IORING_OP_SEND:
            io_uring_prep_send(sqe, fd, address, length, op_flags)
        else:
            io_uring_prep_rw(opcode, sqe, fd, address, length, offset)
            sqe.rw_flags = op_flags
        sqe.flags = flags
        sqe.ioprio |= ioprio
        if buf_group:
            sqe.buf_group = buf_group
        io_uring_sqe_set_data64(sqe, user_data)

    cpdef prep_recv(self, int fd, unsigned long long addr, unsigned length, unsigned long long user_data):
        """Receive at most ``length`` bytes into ``addr`` (recv(2)); res: bytes received, 0 at EOF."""
        cdef io_uring_sqe *sqe = self._sqe()
        io_uring_prep_recv(sqe, fd, <void *><size_t>addr, length, 0)
        io_uring_sqe_set_data64(sqe, user_data)

    cpdef prep_recv_select(self, int fd, unsigned short group, unsigned long long user_data):
        """Receive once, into a buffer the kernel picks from ``group`` when data arrives.

        As tinyloop.raw.uring.Ring.prep_recv_select: the CQE's flags carry
        IORING_CQE_F_BUFFER and the buffer's id when data came; res 0 at
        EOF, -ENOBUFS if the group had no buffer left.
        """
        cdef io_uring_sqe *sqe = self._sqe()
        io_uring_prep_recv(sqe, fd, NULL, 0, 0)   # (length 0: the buffer's)
        sqe.flags |= IOSQE_BUFFER_SELECT
        sqe.buf_group = group
        io_uring_sqe_set_data64(sqe, user_data)

    cpdef prep_send(self, int fd, unsigned long long addr, unsigned length, unsigned long long user_data):
        """Send ``length`` bytes from ``addr`` (send(2), MSG_NOSIGNAL); res: bytes sent, maybe fewer."""
        cdef io_uring_sqe *sqe = self._sqe()
        io_uring_prep_send(sqe, fd, <void *><size_t>addr, length, MSG_NOSIGNAL)
        io_uring_sqe_set_data64(sqe, user_data)

    cpdef prep_cancel(self, unsigned long long target, unsigned long long user_data):
        """Ask the kernel to cancel the operation whose user_data is ``target`` (a request, not a fact)."""
        cdef io_uring_sqe *sqe = self._sqe()
        io_uring_prep_cancel64(sqe, target, 0)
        io_uring_sqe_set_data64(sqe, user_data)

    cdef int _prep_accept(self, int fd, unsigned long long addr, unsigned long long length_addr,
                          int flags, unsigned long long user_data) except -1:
        # prep(IORING_OP_ACCEPT, ...) for Proactor.accept in C (fast.pyx), without prep's keywords.
        cdef io_uring_sqe *sqe = self._sqe()
        io_uring_prep_accept(sqe, fd, <void *><size_t>addr, <void *><size_t>length_addr, flags)
        io_uring_sqe_set_data64(sqe, user_data)
        return 0

    cdef int _prep_nop(self, unsigned long long user_data) except -1:
        # The zero-timeout wait's NOP (tinyloop/ring/fast.pyx), without prep's keywords.
        cdef io_uring_sqe *sqe = self._sqe()
        io_uring_prep_nop(sqe)
        io_uring_sqe_set_data64(sqe, user_data)
        return 0

    # --- io_uring_enter and the completion queue -------------------------------------------

    cpdef int submit_and_wait(self, unsigned wait_nr=1) except -1:
        """Submit every SQE prepared since the last call, and wait for ``wait_nr`` CQEs.

        One io_uring_enter(2), the GIL released while it waits.  Returns
        the number of SQEs the kernel took (0 when its CQ was full: reap,
        then call again).  After a call that waited, the Python signal
        handlers due run first, and a handler's exception (KeyboardInterrupt)
        is raised; otherwise a signal that cut the wait short raises
        InterruptedError, and what the kernel did not take is submitted by
        the next call (liburing counts from the kernel's SQ head).
        """
        cdef int taken
        if not self.opened:
            raise ValueError("the ring is closed")
        self.enters += 1
        if wait_nr:
            with nogil:
                taken = io_uring_submit_and_wait(&self.ring, wait_nr)
            PyErr_CheckSignals()
        else:
            taken = io_uring_submit(&self.ring)
        if taken >= 0:
            self.submitted += taken
            return taken
        if taken == -EBUSY:
            return 0
        raise OSError(-taken, os.strerror(-taken))  # (EINTR makes an InterruptedError)

    cpdef int submit_and_get_events(self) except -1:
        """Submit every SQE prepared since the last call, and wait for none.

        One io_uring_enter(2) with IORING_ENTER_GETEVENTS, so that the
        completions the kernel has are posted (with DEFER_TASKRUN it posts
        them only when asked: io_uring_setup(2)); the GIL is kept, as nothing
        waits.  Returns, and raises, as :meth:`submit_and_wait`.
        """
        cdef int taken
        if not self.opened:
            raise ValueError("the ring is closed")
        self.enters += 1
        taken = io_uring_submit_and_get_events(&self.ring)
        PyErr_CheckSignals()   # (a signal that came during it: its handler runs now, as after a wait)
        if taken >= 0:
            self.submitted += taken
            return taken
        if taken == -EBUSY:
            return 0
        raise OSError(-taken, os.strerror(-taken))

    cpdef unsigned complete(self, object operations) except? 0:
        """Run the completion callback of every CQE posted, oldest first; return how many CQEs.

        ``operations`` is the Proactor's table, user_data -> ``callback(res,
        flags)``: a dict, or the cython core's Operations (fast.pyx).  A CQE with IORING_CQE_F_MORE (a multishot operation still
        armed) leaves its entry in the table; any other CQE is the
        operation's last and takes it out.  A CQE whose user_data is not in
        the table (a cancel request's, a NOP's) is only reaped.  Each CQE's
        slot is handed back before its callback runs, so a callback's
        exception loses nothing: it propagates, and the CQEs after it wait
        for the next call.
        """
        cdef io_uring_cqe *cqe
        cdef unsigned head
        cdef unsigned long long user_data
        cdef int res
        cdef unsigned flags
        cdef unsigned count = 0
        cdef object callback
        cdef bint table = type(operations) is Operations
        if not table and type(operations) is not dict:
            raise TypeError("complete() needs the proactor's table, a dict or an Operations")
        while self.opened:
            # io_uring_for_each_cqe(3)'s step, one CQE at a time: our head,
            # the kernel's tail read with acquire order, the slot by mask.
            head = self.ring.cq.khead[0]
            if head == io_uring_smp_load_acquire(self.ring.cq.ktail):
                break
            cqe = &self.ring.cq.cqes[head & self.ring.cq.ring_mask]
            user_data, res, flags = cqe.user_data, cqe.res, cqe.flags
            io_uring_cq_advance(&self.ring, 1)
            self.completed += 1
            count += 1
            if table:
                callback = (<Operations>operations).take(user_data, flags & IORING_CQE_F_MORE)
            elif flags & IORING_CQE_F_MORE:
                callback = (<dict>operations).get(user_data)
            else:
                callback = (<dict>operations).pop(user_data, None)
            if type(callback) is TransportCompletion:   # a transport's (fast.pyx): no Python call
                (<TransportCompletion>callback).complete_c(res, flags)
            elif callback is not None:
                callback(res, flags)
        return count

    def close(self):
        """Unmap the rings and close the descriptor (the kernel cancels every outstanding operation); idempotent."""
        if self.opened:
            self.opened = False
            io_uring_queue_exit(&self.ring)


cdef class ProvidedBuffers:
    """Provided buffers (5.19) on liburing: tinyloop.raw.uring.BufferRing's C twin, for the cython core.

    ``ProvidedBuffers(ring, group, count, size)``: ``count`` buffers (a
    power of two) of ``size`` bytes, which the kernel takes from for a
    receive that names ``group`` (Ring.prep_recv_select), only when data
    arrives.  The same methods as BufferRing (``data``, ``recycle``,
    ``close``), and :meth:`take_c`, both at once, for the C receive.
    Raises ValueError for a count that is not a power of two, OSError from
    io_uring_register_buf_ring(3) (EINVAL on a kernel before 5.19).
    """

    cdef readonly int group, count, size
    cdef Ring _ring
    cdef io_uring_buf_ring *_entries
    cdef char *_memory
    cdef size_t _entries_size, _memory_size
    cdef int _mask

    def __cinit__(self, Ring ring, int group, int count=256, int size=16 * 1024):
        cdef io_uring_buf_reg registration
        cdef int bid, res
        if count <= 0 or count & (count - 1) or count > 1 << 15 or size <= 0:
            raise ValueError(f"count must be a power of two up to 32768, and size positive, not {count}, {size}")
        self._ring, self.group, self.count, self.size = ring, group, count, size
        # Both areas page-aligned (mmap), as the kernel requires of the ring,
        # and a buffer's pages resident only once the kernel wrote into them.
        self._entries_size = count * sizeof(io_uring_buf)
        self._memory_size = <size_t>count * size
        entries = mmap(NULL, self._entries_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if entries == MAP_FAILED:
            raise MemoryError()
        self._entries = <io_uring_buf_ring *>entries
        memory = mmap(NULL, self._memory_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if memory == MAP_FAILED:
            self._unmap()
            raise MemoryError()
        self._memory = <char *>memory
        io_uring_buf_ring_init(self._entries)
        self._mask = io_uring_buf_ring_mask(count)
        for bid in range(count):
            io_uring_buf_ring_add(self._entries, self._memory + <size_t>bid * size, size, bid, self._mask, bid)
        io_uring_buf_ring_advance(self._entries, count)
        memset(&registration, 0, sizeof(registration))
        registration.ring_addr = <size_t>self._entries
        registration.ring_entries = count
        registration.bgid = group
        res = io_uring_register_buf_ring(&ring.ring, &registration, 0)
        if res < 0:
            self._unmap()
            raise OSError(-res, os.strerror(-res))

    def __dealloc__(self):
        # Never memory the kernel may still write into: an open ring keeps it (leaked, not freed).
        if self._ring is None or not self._ring.opened:
            self._unmap()

    cdef void _unmap(self) noexcept:
        if self._memory != NULL:
            munmap(self._memory, self._memory_size)
            self._memory = NULL
        if self._entries != NULL:
            munmap(self._entries, self._entries_size)
            self._entries = NULL

    cdef int _check(self, unsigned bid, int length) except -1:
        if self._memory == NULL:
            raise ValueError("the provided buffers are closed")
        if bid >= <unsigned>self.count or length < 0 or length > self.size:
            raise ValueError(f"no buffer {bid} with {length} bytes in {self.count} of {self.size}")
        return 0

    cdef object _copy(self, unsigned bid, int length):
        # The ``length`` bytes in buffer ``bid``, as a new bytes object.
        self._check(bid, length)
        return PyBytes_FromStringAndSize(self._memory + <size_t>bid * self.size, length)

    cdef object take_c(self, unsigned bid, int length):
        """A copy of the ``length`` bytes in buffer ``bid``, which goes back to the kernel."""
        data = self._copy(bid, length)
        self._recycle_c(bid)
        return data

    cdef inline void _recycle_c(self, unsigned bid) noexcept:
        # The buffer at the ring's tail again, published with a release store.
        io_uring_buf_ring_add(self._entries, self._memory + <size_t>bid * self.size, self.size,
                              <unsigned short>bid, self._mask, 0)
        io_uring_buf_ring_advance(self._entries, 1)

    def data(self, unsigned bid, int length):
        """A copy of the ``length`` bytes the kernel wrote into buffer ``bid``."""
        return self._copy(bid, length)

    def recycle(self, unsigned bid):
        """Give buffer ``bid`` back to the kernel (after its data was copied out)."""
        self._check(bid, 0)
        self._recycle_c(bid)

    def close(self):
        """Release the memory (after the ring that used it is closed); idempotent."""
        if self._ring is not None and self._ring.opened:
            raise RuntimeError("close the ring first: the kernel may still write into its buffers")
        self._unmap()


# The request's path in C (ProactorCore, StreamCore, iteration): see that file.
include "fast.pyx"
