"""io_uring(7) from its system calls: the rings, mapped and driven from Python.

Every server before this one asks the kernel *which* sockets are ready and
then makes the call itself (readiness).  io_uring turns that around
(completion): the program hands the kernel the operation itself, with its
buffer, and is told later that it is done and how it went.  The hand-over
happens through two rings of memory shared with the kernel:

    submission queue (SQ)   we write a 64-byte entry (SQE) per operation:
                            opcode, descriptor, buffer address and length,
                            and user_data, 64 bits the kernel hands back
    completion queue (CQ)   the kernel writes a 16-byte entry (CQE) per
                            finished operation: our user_data, the result
                            (what the system call would have returned, or
                            -errno), and flags

    fd = io_uring_setup(entries, &params)     # io_uring_setup(2): the rings, and
                                              # where in them each field lives
    mmap(fd, IORING_OFF_SQ_RING / _CQ_RING / _SQES)   # the three shared areas
    ... write SQEs, advance the SQ tail ...
    io_uring_enter(fd, to_submit, min_complete, IORING_ENTER_GETEVENTS)
    ... read CQEs from the CQ head up to the CQ tail, advance the head ...

One io_uring_enter(2) both submits every operation written since the last
one and waits for completions: that one call is where the saving in system
calls comes from.  The standard library has no io_uring, so this file does
what the readiness servers did with ``select``, one level lower: the
system calls through ``ctypes`` (``syscall(2)``), the rings through
``mmap``, the entries packed with ``struct``.  liburing, the C library
most programs use, is the same work in C; its function names
(io_uring_prep_recv, ...) are used here so the two can be read side by side.

Rules this file keeps:
  * Head and tail are free-running 32-bit counters; an entry's slot is the
    counter masked by ``ring_mask``.  The producer moves the tail, the
    consumer the head: the SQ tail and the CQ head are ours, the SQ head and
    the CQ tail the kernel's, and we never write the kernel's.
  * Nothing here owns a buffer.  A caller that passes an address keeps the
    Python object behind it alive, unmoved and untouched, until the
    operation's completion arrives (the completion chapter's first rule).
  * Errors of the system calls raise OSError with errno; an operation's own
    failure is not an exception but a negative ``res`` in its CQE.

Sources: io_uring(7), io_uring_setup(2), io_uring_enter(2),
io_uring_register(2); Jens Axboe, "Efficient IO with io_uring" (2019);
<linux/io_uring.h> for every layout and constant below.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import sys
from collections.abc import Iterator

__all__ = [
    "CQE_F_BUFFER", "CQE_F_MORE", "Ring", "BufferRing", "address_of", "buffer_id", "bytes_address",
    "timespec", "unavailable",
    "IORING_OP_ACCEPT", "IORING_OP_ASYNC_CANCEL", "IORING_OP_CLOSE", "IORING_OP_RECV",
    "IORING_OP_SEND", "IORING_OP_SHUTDOWN", "IORING_OP_TIMEOUT",
    "IOSQE_BUFFER_SELECT", "IOSQE_IO_HARDLINK",
]

# System call numbers: io_uring came after the architectures' tables were
# unified, so these three are the same on x86-64, arm64, riscv64 and most others.
_SYS_IO_URING_SETUP, _SYS_IO_URING_ENTER, _SYS_IO_URING_REGISTER = 425, 426, 427

# Opcodes (enum io_uring_op), the ones this book uses.
IORING_OP_TIMEOUT = 11
IORING_OP_ACCEPT = 13
IORING_OP_ASYNC_CANCEL = 14
IORING_OP_CLOSE = 19
IORING_OP_SEND = 26
IORING_OP_RECV = 27
IORING_OP_SHUTDOWN = 34

# SQE flags (sqe.flags).
IOSQE_IO_HARDLINK = 1 << 3     # the next SQE starts when this one ends, however it ends
IOSQE_BUFFER_SELECT = 1 << 5   # the kernel picks the buffer from a provided-buffer group

# Per-opcode flags carried in sqe.ioprio.
IORING_ACCEPT_MULTISHOT = 1 << 0   # 5.19: one SQE, a CQE per accepted connection
IORING_RECV_MULTISHOT = 1 << 1     # 6.0: one SQE, a CQE per arrival of data

# CQE flags.
CQE_F_BUFFER = 1 << 0   # the upper 16 bits of flags are the id of the buffer used
CQE_F_MORE = 1 << 1     # a multishot operation is still armed: more CQEs will come
_CQE_BUFFER_SHIFT = 16

# io_uring_setup(2) flags and features, io_uring_enter(2) flags.
_SETUP_CQSIZE = 1 << 3
_SETUP_SINGLE_ISSUER = 1 << 12
_SETUP_DEFER_TASKRUN = 1 << 13
_FEAT_SINGLE_MMAP = 1 << 0
_FEAT_NODROP = 1 << 1
_ENTER_GETEVENTS = 1 << 0
_REGISTER_PBUF_RING = 22
_OFF_SQ_RING, _OFF_CQ_RING, _OFF_SQES = 0, 0x8000000, 0x10000000

# struct io_uring_params: seven u32 (sq_entries, cq_entries, flags,
# sq_thread_cpu, sq_thread_idle, features, wq_fd) and three reserved, then
# struct io_sqring_offsets (head, tail, ring_mask, ring_entries, flags,
# dropped, array, resv1, user_addr u64) and struct io_cqring_offsets (head,
# tail, ring_mask, ring_entries, overflow, cqes, flags, resv1, user_addr u64).
_PARAMS = struct.Struct("=10I 8IQ 8IQ")
# struct io_uring_sqe (64 bytes): opcode, flags, ioprio, fd, off, addr, len,
# op_flags (msg_flags, accept_flags, ...), user_data, buf_group, personality,
# file_index, addr3, pad.
_SQE = struct.Struct("=BBHiQQIIQHHiQQ")
# struct io_uring_cqe (16 bytes): user_data, res, flags.
_CQE = struct.Struct("=QiI")
_U32 = struct.Struct("=I")
# struct io_uring_buf (16 bytes): addr, len, bid, resv.  We write the first
# 14 bytes only: in the ring's first entry, resv is the ring's tail
# (struct io_uring_buf_ring), which is not ours to clear.
_BUF = struct.Struct("=QIH")
_BUF_SIZE = 16
_BUF_TAIL_OFFSET = 14
# struct io_uring_buf_reg: ring_addr, ring_entries, bgid, flags, resv[3].
_BUF_REG = struct.Struct("=QIHH3Q")
# struct __kernel_timespec, for IORING_OP_TIMEOUT.
_TIMESPEC = struct.Struct("=qq")

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
# PyErr_CheckSignals runs the Python-level signal handlers due, in the
# calling thread if it is the main one, and raises their exception
# (KeyboardInterrupt for one): what CPython's own blocking calls do when a
# signal cuts them short (PEP 475), and what a call through ctypes does not.
_check_signals = ctypes.pythonapi.PyErr_CheckSignals
_check_signals.restype = ctypes.c_int
_check_signals.argtypes = []


def _check(result: int) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def address_of(buffer: bytearray | mmap.mmap) -> tuple[int, ctypes.c_char]:
    """The address of ``buffer``'s first byte, and the ctypes object that pins it.

    While the returned ctypes array lives, ``buffer`` cannot be resized or
    closed (BufferError): a bytearray the kernel is writing into must not
    move.  Drop the array (``del``) only after the operation's completion.
    """
    # One c_char at the first byte pins the whole buffer, and makes no new
    # ctypes type per length (each such type is a cycle the collector must find).
    pin = ctypes.c_char.from_buffer(buffer)
    return ctypes.addressof(pin), pin


def bytes_address(data: bytes) -> int:
    """The address of an immutable ``data``'s first byte (the caller keeps ``data`` alive)."""
    return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0


def unavailable() -> str | None:
    """Why io_uring cannot be used here, in one line, or None when it can.

    The reasons: not Linux; ``/proc/sys/kernel/io_uring_disabled`` says 2
    (disabled for all) or 1 (only for a group we are not in, and we are not
    root); or io_uring_setup(2) itself fails (ENOSYS on a kernel before 5.1,
    EPERM under a seccomp filter such as a container runtime's default).
    """
    if not sys.platform.startswith("linux"):
        return f"io_uring is Linux's: this is {sys.platform}"
    try:
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            disabled = f.read().strip()
    except OSError:
        disabled = "0"  # kernels before 6.6 have no such switch
    if disabled == "2":
        return "io_uring is disabled on this machine (/proc/sys/kernel/io_uring_disabled is 2)"
    try:
        Ring(entries=2).close()
    except OSError as error:
        reason = {errno.ENOSYS: "this kernel has no io_uring (before 5.1?)",
                  errno.EPERM: "io_uring_setup(2) was refused (EPERM: io_uring_disabled, or a seccomp filter)",
                  }.get(error.errno, f"io_uring_setup(2) failed: {error.strerror}")
        return reason
    return None


class Ring:
    """One io_uring instance: its descriptor and its three shared memory areas.

    ``entries`` is the submission queue's size (rounded up to a power of two
    by the kernel); the completion queue gets four times as many, so a burst
    of completions (a multishot accept under a flood) fits.  Raises OSError
    from io_uring_setup(2) where io_uring is missing or refused (see
    :func:`unavailable`).

    The ring is set up with IORING_SETUP_SINGLE_ISSUER and
    IORING_SETUP_DEFER_TASKRUN where the kernel has them (6.1): only this
    thread submits, and the kernel runs its completion work only inside our
    io_uring_enter calls, never behind our back.  That is also why this
    Python code needs no memory barriers (see the Discussion in
    :meth:`submit_and_wait`).  On an older kernel it falls back to no flags.
    """

    def __init__(self, entries: int = 256) -> None:
        for flags in (_SETUP_CQSIZE | _SETUP_SINGLE_ISSUER | _SETUP_DEFER_TASKRUN, _SETUP_CQSIZE):
            params = bytearray(_PARAMS.size)
            _PARAMS.pack_into(params, 0, 0, 4 * entries, flags, *([0] * 25))
            pointer, pin = address_of(params)
            result = _syscall(ctypes.c_long(_SYS_IO_URING_SETUP), ctypes.c_long(entries),
                              ctypes.c_void_p(pointer))
            del pin
            if result >= 0 or ctypes.get_errno() != errno.EINVAL:
                break
        self.fd = _check(result)
        fields = _PARAMS.unpack_from(params)
        self.sq_entries, self.cq_entries, self.flags = fields[0], fields[1], fields[2]
        self.features = fields[5]
        (sq_head, sq_tail, sq_mask, _, _, _, sq_array, _, _) = fields[10:19]
        (cq_head, cq_tail, cq_mask, _, _, cqes, _, _, _) = fields[19:28]
        if not self.features & _FEAT_NODROP:
            os.close(self.fd)
            raise OSError(errno.ENOTSUP, "this kernel's io_uring may drop completions (no IORING_FEAT_NODROP, 5.5)")
        try:
            sq_size = sq_array + self.sq_entries * 4
            cq_size = cqes + self.cq_entries * _CQE.size
            if self.features & _FEAT_SINGLE_MMAP:   # 5.4: both rings in one mapping
                sq_size = cq_size = max(sq_size, cq_size)
            self._sq = mmap.mmap(self.fd, sq_size, offset=_OFF_SQ_RING)
            self._cq = (self._sq if self.features & _FEAT_SINGLE_MMAP
                        else mmap.mmap(self.fd, cq_size, offset=_OFF_CQ_RING))
            self._sqes = mmap.mmap(self.fd, self.sq_entries * _SQE.size, offset=_OFF_SQES)
        except BaseException:
            os.close(self.fd)
            raise
        self._sq_head_at, self._sq_tail_at, self._sq_array_at = sq_head, sq_tail, sq_array
        self._sq_mask = _U32.unpack_from(self._sq, sq_mask)[0]
        self._cq_head_at, self._cq_tail_at, self._cqes_at = cq_head, cq_tail, cqes
        self._cq_mask = _U32.unpack_from(self._cq, cq_mask)[0]
        # The SQ tail is ours: keep it here and publish it before each enter.
        self._tail = _U32.unpack_from(self._sq, sq_tail)[0]
        self._unsubmitted = 0
        # Counters for the chapter's figures (system calls, SQEs, CQEs).
        self.enters = self.submitted = self.completed = 0

    # --- the submission queue -------------------------------------------------------------

    def prep(self, opcode: int, fd: int, *, addr: int = 0, length: int = 0, offset: int = 0,
             op_flags: int = 0, user_data: int = 0, flags: int = 0, ioprio: int = 0,
             buf_group: int = 0) -> None:
        """Write one SQE into the next free slot (submitted by the next :meth:`submit_and_wait`).

        The arguments are the SQE's fields (io_uring_enter(2), "Submission
        queue entry"): ``addr``/``length`` the buffer, ``offset`` the file
        offset or the timeout's count, ``op_flags`` the opcode's own flags
        (msg_flags for send and recv), ``user_data`` what its CQE will carry.
        When every slot is taken, the queued SQEs are submitted first.
        """
        if self._unsubmitted == self.sq_entries:
            self.submit_and_wait(0)
        index = self._tail & self._sq_mask
        _SQE.pack_into(self._sqes, index * _SQE.size, opcode, flags, ioprio, fd, offset, addr,
                       length, op_flags, user_data, buf_group, 0, 0, 0, 0)
        # The SQ array says which SQE each slot of the ring means; we keep
        # them in step, so slot i always names SQE i.
        _U32.pack_into(self._sq, self._sq_array_at + index * 4, index)
        self._tail = (self._tail + 1) & 0xFFFFFFFF
        self._unsubmitted += 1

    def prep_accept(self, fd: int, user_data: int, *, multishot: bool = False) -> None:
        """Accept a connection on listener ``fd`` (accept4(2), SOCK_CLOEXEC); res: the new descriptor."""
        self.prep(IORING_OP_ACCEPT, fd, op_flags=os.O_CLOEXEC, user_data=user_data,
                  ioprio=IORING_ACCEPT_MULTISHOT if multishot else 0)

    def prep_recv(self, fd: int, addr: int, length: int, user_data: int) -> None:
        """Receive at most ``length`` bytes into ``addr`` (recv(2)); res: bytes received, 0 at EOF."""
        self.prep(IORING_OP_RECV, fd, addr=addr, length=length, user_data=user_data)

    def prep_recv_select(self, fd: int, group: int, user_data: int) -> None:
        """Receive once, into a buffer the kernel picks from ``group`` when data arrives.

        The receive holds no buffer while it waits.  Its CQE's flags carry
        CQE_F_BUFFER and the buffer's id when data came (res bytes of it);
        res is 0 at EOF, -ENOBUFS if the group had no buffer left (nothing
        was received), or another -errno.
        """
        self.prep(IORING_OP_RECV, fd, user_data=user_data, flags=IOSQE_BUFFER_SELECT, buf_group=group)

    def prep_recv_multishot(self, fd: int, group: int, user_data: int) -> None:
        """Receive whenever data arrives, into a buffer the kernel picks from ``group``.

        Each CQE's flags carry CQE_F_BUFFER and the buffer's id; CQE_F_MORE
        says the receive is still armed.  Without it, the receive has ended
        (EOF, an error, or -ENOBUFS when the group ran out of buffers) and
        must be submitted again if more data is wanted.
        """
        self.prep(IORING_OP_RECV, fd, user_data=user_data, flags=IOSQE_BUFFER_SELECT,
                  ioprio=IORING_RECV_MULTISHOT, buf_group=group)

    def prep_send(self, fd: int, addr: int, length: int, user_data: int) -> None:
        """Send ``length`` bytes from ``addr`` (send(2), MSG_NOSIGNAL); res: bytes sent, maybe fewer."""
        import socket  # MSG_NOSIGNAL: a peer that left gives -EPIPE, not SIGPIPE
        self.prep(IORING_OP_SEND, fd, addr=addr, length=length, op_flags=socket.MSG_NOSIGNAL,
                  user_data=user_data)

    def prep_shutdown(self, fd: int, how: int, user_data: int, *, link: bool = False) -> None:
        """shutdown(2) ``fd``; with ``link``, the next SQE starts only after this one ends."""
        self.prep(IORING_OP_SHUTDOWN, fd, length=how, user_data=user_data,
                  flags=IOSQE_IO_HARDLINK if link else 0)

    def prep_close(self, fd: int, user_data: int) -> None:
        """close(2) ``fd``."""
        self.prep(IORING_OP_CLOSE, fd, user_data=user_data)

    def prep_cancel(self, target: int, user_data: int) -> None:
        """Ask the kernel to cancel the operation whose user_data is ``target``.

        A request, not a fact: its CQE says 0 (cancelled: the target's own
        CQE, -ECANCELED, comes too), -ENOENT (nothing to cancel: the target's
        CQE has already been posted or is about to be), or -EALREADY (it is
        running and may still complete).  Either way the target's CQE is the
        one that says how the operation ended.
        """
        self.prep(IORING_OP_ASYNC_CANCEL, -1, addr=target, user_data=user_data)

    def prep_timeout(self, timespec: bytearray, user_data: int) -> None:
        """A timer as an operation: its CQE arrives with -ETIME after the ``timespec`` interval.

        ``timespec`` comes from :func:`timespec`; keep it alive until the CQE.
        """
        addr, pin = address_of(timespec)
        self.prep(IORING_OP_TIMEOUT, -1, addr=addr, length=1, user_data=user_data)
        del pin  # the kernel copies the interval at submission (IORING_FEAT_SUBMIT_STABLE)

    # --- io_uring_enter and the completion queue -------------------------------------------

    def submit_and_wait(self, wait_nr: int = 1) -> int:
        """Submit every SQE prepared since the last call, and wait for ``wait_nr`` CQEs.

        One io_uring_enter(2).  ``wait_nr`` 0 submits without waiting.
        Returns the number of SQEs the kernel took.  Raises OSError for the
        call's errors (EINTR when a signal arrived first: the SQEs were still
        submitted unless the kernel says otherwise, so the next call submits
        whatever it did not take).  After a call that waited, the Python
        signal handlers due run before it returns, as after CPython's own
        blocking calls (PEP 475): a handler's exception, KeyboardInterrupt
        for one, is raised instead.
        """
        # Discussion: the kernel reads the SQ tail, and the SQEs behind it,
        # only inside io_uring_enter (no SQPOLL thread here), and it writes
        # CQEs and the CQ tail only inside io_uring_enter too (DEFER_TASKRUN).
        # A system call is a full barrier, so a plain store before it and a
        # plain load after it are ordered.  That is why this Python, which
        # cannot issue a memory barrier, is correct: liburing's
        # io_uring_smp_store_release and load_acquire are needed when the
        # kernel reads or writes the rings concurrently (SQPOLL, or
        # completions posted from another CPU without DEFER_TASKRUN).
        _U32.pack_into(self._sq, self._sq_tail_at, self._tail)
        to_submit = self._unsubmitted
        self.enters += 1
        taken = _syscall(ctypes.c_long(_SYS_IO_URING_ENTER), ctypes.c_long(self.fd),
                         ctypes.c_long(to_submit), ctypes.c_long(wait_nr),
                         ctypes.c_long(_ENTER_GETEVENTS if wait_nr else 0),
                         ctypes.c_void_p(0), ctypes.c_long(0))
        if taken < 0:
            code = ctypes.get_errno()  # (ctypes' copy, saved right after the call)
            # What the kernel took is what moved its SQ head.
            head = _U32.unpack_from(self._sq, self._sq_head_at)[0]
            self._unsubmitted = (self._tail - head) & 0xFFFFFFFF
        else:
            self._unsubmitted -= taken
            self.submitted += taken
        if wait_nr:
            # A signal ends the wait, yet the call returns the count of SQEs
            # taken, not EINTR, when it took any: only an explicit check is
            # sure to run the handler now.  Left to the eval loop, it runs
            # later on 3.11 and 3.12, and never on 3.13.0 in a child forked
            # from a thread other than the main one (even a pure-Python
            # loop there does not run it), whose next wait then blocks for
            # good.
            _check_signals()
        if taken < 0:
            if code == errno.EBUSY:      # the CQ overflowed (NODROP): reap, then enter again
                return 0
            raise OSError(code, os.strerror(code))
        return taken

    def completions(self) -> Iterator[tuple[int, int, int]]:
        """Every CQE the kernel has posted: ``(user_data, res, flags)``, oldest first.

        Each CQE's slot is handed back (the CQ head advances) as it is
        yielded, so the kernel may reuse it; stop early and the rest stay
        for the next call.
        """
        cq = self._cq
        head = _U32.unpack_from(cq, self._cq_head_at)[0]
        while True:
            tail = _U32.unpack_from(cq, self._cq_tail_at)[0]
            if head == tail:
                return
            while head != tail:
                entry = _CQE.unpack_from(cq, self._cqes_at + (head & self._cq_mask) * _CQE.size)
                head = (head + 1) & 0xFFFFFFFF
                _U32.pack_into(cq, self._cq_head_at, head)
                self.completed += 1
                yield entry

    def register_buffer_ring(self, ring_address: int, entries: int, group: int) -> None:
        """io_uring_register(2) IORING_REGISTER_PBUF_RING: a provided-buffer ring for ``group``."""
        reg = bytearray(_BUF_REG.size)
        _BUF_REG.pack_into(reg, 0, ring_address, entries, group, 0, 0, 0, 0)
        addr, pin = address_of(reg)
        _check(_syscall(ctypes.c_long(_SYS_IO_URING_REGISTER), ctypes.c_long(self.fd),
                        ctypes.c_long(_REGISTER_PBUF_RING), ctypes.c_void_p(addr), ctypes.c_long(1)))
        del pin

    def close(self) -> None:
        """Unmap the rings and close the descriptor (which cancels every outstanding operation)."""
        for area in {id(a): a for a in (self._sqes, self._cq, self._sq)}.values():
            area.close()
        os.close(self.fd)


def timespec(seconds: float) -> bytearray:
    """A struct __kernel_timespec for ``seconds``, for :meth:`Ring.prep_timeout`."""
    whole = int(seconds)
    return bytearray(_TIMESPEC.pack(whole, int((seconds - whole) * 1e9)))


def buffer_id(flags: int) -> int:
    """The id of the provided buffer a CQE used (its flags must have CQE_F_BUFFER)."""
    return flags >> _CQE_BUFFER_SHIFT


class BufferRing:
    """Provided buffers (6.0): ``count`` buffers of ``size`` bytes the kernel picks from.

    With a multishot receive, no buffer belongs to a connection while it
    waits: the kernel takes one from this ring only when data arrives, and
    names it in the CQE (:func:`buffer_id`).  The program copies the data
    out and gives the buffer back (:meth:`recycle`).  ``count`` must be a
    power of two (the ring is indexed by a mask); ``group`` is the id
    receives name.  Raises OSError from io_uring_register(2) (EINVAL on a
    kernel before 5.19).
    """

    def __init__(self, ring: Ring, group: int, count: int = 256, size: int = 16 * 1024) -> None:
        if count & (count - 1):
            raise ValueError(f"count must be a power of two, not {count}")
        self.group, self.count, self.size = group, count, size
        # Both areas page-aligned, as the kernel requires of the ring, and
        # fixed in place for as long as it may write into them.
        self._entries = mmap.mmap(-1, count * _BUF_SIZE)
        self._memory = mmap.mmap(-1, count * size)
        ring_address, self._ring_pin = address_of(self._entries)
        self._base, self._memory_pin = address_of(self._memory)
        self.view = memoryview(self._memory)
        self._tail = 0
        for bid in range(count):
            self._add(bid)
        self._publish()
        ring.register_buffer_ring(ring_address, count, group)

    def _add(self, bid: int) -> None:
        slot = self._tail & (self.count - 1)
        _BUF.pack_into(self._entries, slot * _BUF_SIZE, self._base + bid * self.size, self.size, bid)
        self._tail = (self._tail + 1) & 0xFFFF

    def _publish(self) -> None:
        # The tail shares the first entry's last u16 (struct io_uring_buf_ring).
        struct.pack_into("=H", self._entries, _BUF_TAIL_OFFSET, self._tail)

    def data(self, bid: int, length: int) -> bytes:
        """A copy of the ``length`` bytes the kernel wrote into buffer ``bid``."""
        start = bid * self.size
        return bytes(self.view[start:start + length])

    def recycle(self, bid: int) -> None:
        """Give buffer ``bid`` back to the kernel (after its data was copied out)."""
        self._add(bid)
        self._publish()

    def close(self) -> None:
        """Release the memory (after the ring that used it is closed)."""
        self.view.release()
        del self._ring_pin, self._memory_pin
        self._entries.close()
        self._memory.close()
