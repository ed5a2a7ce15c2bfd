/* benchmarks/peers/c/uring_floor.h
 *
 * What the C floors on io_uring(7) (http_uring_floor.c, echo_uring_floor.c)
 * share, through liburing: the ring, the provided-buffer ring, the armed
 * accept, the event loop itself, and each connection's receive: its armed
 * multishot receive, the buffers it filled, its end and its close, so that
 * each floor's file holds only what it does with the bytes.  A floor's
 * struct conn begins with a struct uring_conn, and the floor defines, after
 * including this file:
 *
 *   static void *uring_accepted(int fd);
 *       a new connection: return uring_conn_new(sizeof (struct conn), HOW
 *       MANY BYTES OF IT TO ZERO, fd), or NULL to refuse it.
 *   static void uring_progress(void *conn);
 *       after each of its completions: use what is held, send, and end with
 *       uring_conn_next().
 *   static void uring_sent(void *conn, int res);
 *       its send completed: res bytes went, or -errno; then uring_progress.
 *
 * and its main() returns uring_floor_main(argc, argv, NAME).
 *
 * The operations (the other floors' system calls):
 *   multishot accept (5.19)   one SQE on the listener, a CQE per connection
 *   multishot receive (6.0)   one SQE per connection, a CQE each time data
 *                             arrives, in a buffer the kernel takes from the
 *                             provided-buffer ring (BUFFERS x BUFFER_SIZE,
 *                             shared by every connection) and names in the
 *                             CQE's flags
 *   send, shutdown, close     one SQE each, as the floor requires
 *
 * Rules it keeps:
 *   * An operation whose CQE lacks IORING_CQE_F_MORE has ended, whatever its
 *     result, and is submitted again if it is still wanted (a multishot
 *     receive ends at EOF, on an error, when cancelled, and with -ENOBUFS
 *     when the ring had no free buffer).
 *   * A received buffer is held, in its connection's list and in order,
 *     until the floor has used its bytes, and then given back to the ring.
 *   * user_data is the connection's address with the operation's kind in
 *     its low three bits.  A connection is freed only at its close's
 *     completion, which comes after its receive's and send's last CQEs; the
 *     CQEs of a cancel or a shutdown may come later, and are never traced
 *     back to their connection.
 *   * The ring is set up with IORING_SETUP_SINGLE_ISSUER and DEFER_TASKRUN
 *     where the kernel has them (6.1), as the Python stages' is: completion
 *     work runs only inside our io_uring_enter calls.
 *   * With TINYLOOP_SQPOLL=MS in the environment the ring is set up with
 *     IORING_SETUP_SQPOLL instead (DEFER_TASKRUN is refused beside it): a
 *     kernel thread of this process polls the SQ, and sleeps after MS
 *     milliseconds (sq_thread_idle) without work.  A turn then submits with
 *     io_uring_submit, which enters the kernel only to wake a sleeping
 *     thread (IORING_SQ_NEED_WAKEUP), and waits in io_uring_enter only when
 *     no CQE is ready.  sq_thread_cpu is not set: the thread inherits the
 *     process's CPU affinity.  benchmarks/completion.py measures the two.
 *   * Where io_uring is missing or refused, the floor says why in one line
 *     and exits 1.
 */
#ifndef TINYLOOP_URING_FLOOR_H
#define TINYLOOP_URING_FLOOR_H

#include <errno.h>
#include <liburing.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <unistd.h>

#include "listener.h"

#define ENTRIES 256            /* submission queue; the completion queue has 4x */
#ifndef BUFFERS                /* a floor may choose its own, before including this file */
#define BUFFERS 256            /* provided buffers: a power of two */
#define BUFFER_SIZE (16 * 1024)
#endif
#define GROUP 1                /* the buffer group the receives name */
#define NONE (-1)              /* the end of a list of held buffers */

/* The kind of operation, in user_data's low bits. */
enum { ACCEPT, RECV, SEND, SHUTDOWN, CLOSE, CANCEL, TIMER };
#define KIND_MASK 7u

/* A connection's received buffers, oldest first, not yet used. */
struct held {
    int first, last;
    unsigned count;
};

static struct io_uring ring;
static struct io_uring_buf_ring *buffers;
static char *buffer_memory;
/* The lists of held buffers, threaded through these arrays by buffer id. */
static int held_next[BUFFERS];
static unsigned held_start[BUFFERS], held_end[BUFFERS];
static int listener = -1;
static long open_conns = 0;
static int sqpoll = 0;         /* the ring has an SQ poll thread (TINYLOOP_SQPOLL) */
/* Out of descriptors: accept again after this (asyncio's and the stages' 1 s). */
static struct __kernel_timespec rest = {.tv_sec = 1};

/* What this file keeps of a connection: the first member of a floor's struct conn. */
struct uring_conn {
    int fd;                    /* -1 once its close is submitted */
    int peer_done;             /* the receive saw EOF */
    int failed;                /* the peer reset, or a send failed */
    int receiving;             /* the multishot receive is armed */
    int cancelling;            /* a cancel of it is outstanding */
    struct held held;          /* buffers received, not yet used */
};

static void *uring_accepted(int fd);
static void uring_progress(void *conn);
static void uring_sent(void *conn, int res);

/* The next free SQE, its user_data set; a full submission queue is submitted first. */
static struct io_uring_sqe *sqe_for(void *conn, unsigned kind) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);  /* the kernel took them all: SUBMIT_ALL */
    }
    io_uring_sqe_set_data64(sqe, (__u64)(uintptr_t)conn | kind);
    return sqe;
}

static void arm_accept(void) {
    io_uring_prep_multishot_accept(sqe_for(NULL, ACCEPT), listener, NULL, NULL, SOCK_CLOEXEC);
}

/* Arm conn's multishot receive on fd, into the provided buffers. */
static void arm_recv(void *conn, int fd) {
    struct io_uring_sqe *sqe = sqe_for(conn, RECV);
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = GROUP;
}

/* Ask the kernel to cancel conn's receive: a request, its CQE comes later. */
static void cancel_recv(void *conn) {
    io_uring_prep_cancel64(sqe_for(NULL, CANCEL), (__u64)(uintptr_t)conn | RECV, 0);
}

/* Close fd once its last answer is out: a FIN (unless the peer is gone,
 * ``graceful`` 0), then the close, hard-linked, so the close runs even when
 * the shutdown fails.  The close's CQE names conn. */
static void submit_close(void *conn, int fd, int graceful) {
    if (graceful) {
        struct io_uring_sqe *sqe = sqe_for(NULL, SHUTDOWN);
        io_uring_prep_shutdown(sqe, fd, SHUT_WR);
        sqe->flags |= IOSQE_IO_HARDLINK;
    }
    io_uring_prep_close(sqe_for(conn, CLOSE), fd);
}

static void recycle(int bid) {
    io_uring_buf_ring_add(buffers, buffer_memory + (size_t)bid * BUFFER_SIZE, BUFFER_SIZE, (unsigned short)bid,
                          io_uring_buf_ring_mask(BUFFERS), 0);
    io_uring_buf_ring_advance(buffers, 1);
}

static void held_init(struct held *h) { h->first = h->last = NONE; h->count = 0; }

/* Hold the buffer a receive's CQE names (``flags``), with its ``len`` bytes. */
static void held_push(struct held *h, unsigned flags, int len) {
    int bid = (int)(flags >> IORING_CQE_BUFFER_SHIFT);
    held_start[bid] = 0;
    held_end[bid] = (unsigned)len;
    held_next[bid] = NONE;
    if (h->last == NONE)
        h->first = bid;
    else
        held_next[h->last] = bid;
    h->last = bid;
    h->count++;
}

/* The oldest held bytes: their length (0: none), and where they are in *data. */
static size_t held_peek(const struct held *h, const char **data) {
    if (h->first == NONE)
        return 0;
    *data = buffer_memory + (size_t)h->first * BUFFER_SIZE + held_start[h->first];
    return held_end[h->first] - held_start[h->first];
}

/* ``n`` of the oldest held bytes are used: a buffer used up goes back to the ring. */
static void held_used(struct held *h, size_t n) {
    int bid = h->first;
    held_start[bid] += (unsigned)n;
    if (held_start[bid] < held_end[bid])
        return;
    h->first = held_next[bid];
    if (h->first == NONE)
        h->last = NONE;
    h->count--;
    recycle(bid);
}

/* Give every held buffer back (the connection is gone). */
static void held_drop(struct held *h) {
    for (int bid = h->first; bid != NONE; bid = held_next[bid])
        recycle(bid);
    held_init(h);
}

/* A new connection of ``size`` bytes, the first ``zeroed`` of them zero, its receive armed; or NULL. */
static void *uring_conn_new(size_t size, size_t zeroed, int fd) {
    struct uring_conn *u = malloc(size);
    if (u) {
        memset(u, 0, zeroed);
        u->fd = fd;
        held_init(&u->held);
        arm_recv(u, fd);
        u->receiving = 1;
    }
    return u;
}

/* A CQE of u's receive: a buffer filled, EOF, or an error. */
static void uring_conn_received(struct uring_conn *u, int res, unsigned flags) {
    if (!(flags & IORING_CQE_F_MORE))
        u->receiving = u->cancelling = 0;  /* ended: uring_conn_next() arms it again if wanted */
    if (flags & IORING_CQE_F_BUFFER)
        held_push(&u->held, flags, res);
    else if (res == 0)
        u->peer_done = 1;
    else if (res < 0 && res != -ENOBUFS && res != -ECANCELED)
        u->failed = 1;  /* ECONNRESET and friends */
}

/* The end of a floor's uring_progress: cancel the receive unless it
 * ``wants_read`` (backpressure, or a close to come), arm it again if it
 * does, and close once ``done`` and nothing (no receive, no ``sending``)
 * is outstanding. */
static void uring_conn_next(struct uring_conn *u, int done, int wants_read, int sending) {
    wants_read = wants_read && !done && !u->peer_done;
    if (!wants_read && u->receiving && !u->cancelling) {
        u->cancelling = 1;
        cancel_recv(u);
    }
    if (done && !u->receiving && !sending) {
        submit_close(u, u->fd, !u->failed);
        u->fd = -1;
    } else if (wants_read && !u->receiving) {
        arm_recv(u, u->fd);
        u->receiving = 1;
    }
}

static void on_accept(int res, unsigned flags) {
    if (res >= 0) {
        if (uring_accepted(res))
            open_conns++;
        else
            close(res);
    }
    if (flags & IORING_CQE_F_MORE)
        return;  /* still armed */
    if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM) {
        io_uring_prep_timeout(sqe_for(NULL, TIMER), &rest, 0, 0);  /* the others wait in the backlog */
        return;
    }
    arm_accept();
}

/* io_uring, its provided-buffer ring, and the armed accept; 0, or -errno. */
static int uring_setup(void) {
    struct io_uring_params params = {.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL
                                              | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                                     .cq_entries = 4 * ENTRIES};
    const char *idle = getenv("TINYLOOP_SQPOLL");
    if (idle && *idle) {
        char *end;
        long ms = strtol(idle, &end, 10);
        if (*end || ms < 0 || ms > 60000)
            return -EDOM;  /* not a count of milliseconds */
        params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SQPOLL;
        params.sq_thread_idle = (unsigned)ms;
        sqpoll = 1;
    }
    int err = io_uring_queue_init_params(ENTRIES, &ring, &params);
    if (err == -EINVAL && !sqpoll) {  /* a kernel before 6.1 */
        params = (struct io_uring_params){.flags = IORING_SETUP_CQSIZE, .cq_entries = 4 * ENTRIES};
        err = io_uring_queue_init_params(ENTRIES, &ring, &params);
    }
    if (err < 0)
        return err;
    /* Both areas page-aligned, as the kernel requires of the ring; touched
     * only as far as traffic needs them. */
    buffers = mmap(NULL, BUFFERS * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    buffer_memory = mmap(NULL, (size_t)BUFFERS * BUFFER_SIZE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffers == MAP_FAILED || buffer_memory == MAP_FAILED)
        return -ENOMEM;
    io_uring_buf_ring_init(buffers);
    struct io_uring_buf_reg reg = {.ring_addr = (__u64)(uintptr_t)buffers, .ring_entries = BUFFERS,
                                   .bgid = GROUP};
    if ((err = io_uring_register_buf_ring(&ring, &reg, 0)) < 0)
        return err;  /* EINVAL: a kernel before 5.19 */
    for (int bid = 0; bid < BUFFERS; bid++)
        io_uring_buf_ring_add(buffers, buffer_memory + (size_t)bid * BUFFER_SIZE, BUFFER_SIZE,
                              (unsigned short)bid, io_uring_buf_ring_mask(BUFFERS), bid);
    io_uring_buf_ring_advance(buffers, BUFFERS);
    arm_accept();
    return 0;
}

static int uring_floor_main(int argc, char **argv, const char *name) {
    listener = floor_listen(argc, argv);
    if (listener < 0)
        return listener == -2 ? 2 : 1;
    /* Linux copies TCP_NODELAY from a listener to the sockets it accepts:
     * a connection then costs no system call of its own. */
    int one = 1;
    setsockopt(listener, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int err = uring_setup();
    char label[64];  /* NAME, or NAME-sqpoll: the announce and stop lines say which ring this is */
    snprintf(label, sizeof label, "%s%s", name, sqpoll ? "-sqpoll" : "");
    name = label;
    if (err < 0) {
        if (err == -EDOM)
            fprintf(stderr, "tinyloop: %s: TINYLOOP_SQPOLL must be milliseconds, 0 to 60000\n", name);
        else
            fprintf(stderr, "tinyloop: %s: io_uring cannot be used here%s: %s%s\n", name,
                    sqpoll ? " with SQPOLL" : "", strerror(-err),
                    err == -EPERM ? " (io_uring_disabled, or a seccomp filter)" : "");
        return 1;
    }
    floor_announce(name, listener);

    /* This loop is the whole event loop: submit, wait for completions, act on them. */
    while (!stopping) {
        if (sqpoll) {
            /* The thread submits; enter only to wake it, or to wait. */
            struct io_uring_cqe *first;
            err = io_uring_submit(&ring);
            if (err >= 0 && !io_uring_cq_ready(&ring))
                err = io_uring_wait_cqe(&ring, &first);
        } else
            err = io_uring_submit_and_wait(&ring, 1);
        if (err < 0 && err != -EINTR && err != -EAGAIN && err != -EBUSY) {
            fprintf(stderr, "tinyloop: %s: io_uring_enter: %s\n", name, strerror(-err));
            break;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            unsigned kind = (unsigned)(cqe->user_data & KIND_MASK);
            void *conn = (void *)(uintptr_t)(cqe->user_data & ~(__u64)KIND_MASK);
            if (kind == ACCEPT)
                on_accept(cqe->res, cqe->flags);
            else if (kind == TIMER)
                arm_accept();
            else if (kind == RECV) {
                uring_conn_received(conn, cqe->res, cqe->flags);
                uring_progress(conn);
            } else if (kind == SEND)
                uring_sent(conn, cqe->res);
            else if (kind == CLOSE) {  /* the connection is gone: no CQE names it again */
                held_drop(&((struct uring_conn *)conn)->held);
                free(conn);
                open_conns--;
            }  /* SHUTDOWN and CANCEL: their targets' CQEs tell the story */
        }
        io_uring_cq_advance(&ring, seen);
    }
    /* The armed accept holds the listener until the kernel tears the ring
     * down, after exit: shutdown(2) stops the listening now, so the port is
     * free when we are gone.  Connections still open are closed by exit(3). */
    shutdown(listener, SHUT_RDWR);
    io_uring_queue_exit(&ring);
    close(listener);
    fprintf(stderr, "tinyloop: %s: stopped (%ld connections open)\n", name, open_conns);
    return 0;
}

#endif
