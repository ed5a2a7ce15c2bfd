# tinyloop/ring/liburing.pxd
#
# The part of liburing's C API that tinyloop.ring's Cython core calls,
# declared for Cython: the one file that says what we take from
# "liburing.h".  liburing itself is not in the repository; the build links
# the system's copy (Debian: liburing-dev, Fedora: liburing-devel).
#
# Rules this file keeps:
#   * Declarations only, in the shape of liburing's manual pages
#     (io_uring_queue_init_params(3), io_uring_get_sqe(3),
#     io_uring_prep_recv(3), io_uring_submit_and_wait(3),
#     io_uring_cq_advance(3), ...), each function named as its page is.
#   * ``nogil``: none of these touch Python objects, so the wait can run
#     with the GIL released (another thread may then take it: an
#     executor's worker, a thread calling call_soon_threadsafe).
#   * A struct is declared with the fields we use and no others.  Cython
#     needs no more: the C compiler sees the real struct from liburing.h.
#   * Pointer arguments the kernel only stores (a sockaddr, a socklen_t,
#     a __kernel_timespec) are declared ``void *``: the core passes the
#     address a Python buffer was pinned at, and C converts it.

cdef extern from "liburing.h" nogil:
    # -- Setup flags, features, opcodes and flags (<linux/io_uring.h>) ----------
    enum:
        IORING_SETUP_CQSIZE
        IORING_SETUP_SINGLE_ISSUER      # 6.0: one task submits
        IORING_SETUP_DEFER_TASKRUN      # 6.1: completion work only inside our io_uring_enter
        IORING_FEAT_NODROP              # 5.5: a full CQ holds completions back, never drops them
        IORING_CQE_F_MORE
        IORING_CQE_F_BUFFER             # the upper bits of flags name the provided buffer used
        IORING_CQE_BUFFER_SHIFT
        IOSQE_BUFFER_SELECT             # the kernel picks the buffer from sqe.buf_group
        IORING_OP_NOP
        IORING_OP_POLL_ADD
        IORING_OP_TIMEOUT
        IORING_OP_ACCEPT
        IORING_OP_ASYNC_CANCEL
        IORING_OP_CONNECT
        IORING_OP_CLOSE
        IORING_OP_SEND
        IORING_OP_RECV

    # -- The structures (io_uring_setup(2), io_uring_enter(2)) -------------------
    struct io_uring_sqe:
        unsigned char flags
        unsigned short ioprio
        unsigned int rw_flags          # the opcode's own flags (msg_flags, accept_flags, ...)
        unsigned short buf_group

    struct io_uring_cqe:
        unsigned long long user_data
        int res
        unsigned int flags

    struct io_uring_cq:
        unsigned *khead                # ours: the consumer's
        unsigned *ktail                # the kernel's
        unsigned ring_mask
        io_uring_cqe *cqes

    struct io_uring:
        io_uring_cq cq
        unsigned flags
        unsigned features

    struct io_uring_params:
        unsigned sq_entries
        unsigned cq_entries
        unsigned flags
        unsigned features

    # -- The ring (io_uring_queue_init_params(3), io_uring_queue_exit(3)) ---------
    # Each returns 0 or -errno; liburing never sets errno.
    int io_uring_queue_init_params(unsigned entries, io_uring *ring, io_uring_params *p)
    void io_uring_queue_exit(io_uring *ring)

    # -- Submission (io_uring_get_sqe(3), io_uring_prep_*(3), io_uring_submit(3)) --
    io_uring_sqe *io_uring_get_sqe(io_uring *ring)   # NULL when the SQ is full
    void io_uring_prep_rw(int op, io_uring_sqe *sqe, int fd, const void *addr, unsigned len,
                          unsigned long long offset)
    void io_uring_prep_nop(io_uring_sqe *sqe)
    void io_uring_prep_recv(io_uring_sqe *sqe, int sockfd, void *buf, size_t len, int flags)
    void io_uring_prep_send(io_uring_sqe *sqe, int sockfd, const void *buf, size_t len, int flags)
    void io_uring_prep_accept(io_uring_sqe *sqe, int fd, void *addr, void *addrlen, int flags)
    void io_uring_prep_connect(io_uring_sqe *sqe, int fd, const void *addr, unsigned addrlen)
    void io_uring_prep_poll_add(io_uring_sqe *sqe, int fd, unsigned poll_mask)
    void io_uring_prep_timeout(io_uring_sqe *sqe, void *ts, unsigned count, unsigned flags)
    void io_uring_prep_cancel64(io_uring_sqe *sqe, unsigned long long user_data, int flags)
    void io_uring_prep_close(io_uring_sqe *sqe, int fd)
    void io_uring_sqe_set_data64(io_uring_sqe *sqe, unsigned long long data)
    int io_uring_submit(io_uring *ring)
    # One io_uring_enter(2): submit what was prepared, wait for wait_nr CQEs;
    # the count of SQEs submitted, or -errno.
    int io_uring_submit_and_wait(io_uring *ring, unsigned wait_nr)
    # The same, waiting for none, but asking for completions (IORING_ENTER_GETEVENTS:
    # with DEFER_TASKRUN the kernel posts them only when asked) (liburing 2.3)
    int io_uring_submit_and_get_events(io_uring *ring)

    # -- Provided buffers (io_uring_register_buf_ring(3), io_uring_buf_ring_add(3)) --
    struct io_uring_buf:             # one entry of the ring: sizeof is what the C compiler says
        pass
    struct io_uring_buf_ring:
        pass
    struct io_uring_buf_reg:
        unsigned long long ring_addr
        unsigned ring_entries
        unsigned short bgid
    int io_uring_register_buf_ring(io_uring *ring, io_uring_buf_reg *reg, unsigned flags)
    void io_uring_buf_ring_init(io_uring_buf_ring *br)
    int io_uring_buf_ring_mask(unsigned ring_entries)
    void io_uring_buf_ring_add(io_uring_buf_ring *br, void *addr, unsigned len, unsigned short bid,
                               int mask, int buf_offset)
    void io_uring_buf_ring_advance(io_uring_buf_ring *br, int count)

    # -- Completion (io_uring_cq_advance(3)) --------------------------------------
    void io_uring_cq_advance(io_uring *ring, unsigned nr)
    unsigned io_uring_smp_load_acquire(unsigned *p)   # (a macro: liburing/barrier.h)
