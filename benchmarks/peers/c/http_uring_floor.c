/* benchmarks/peers/c/http_uring_floor.c
 *
 * The floor under completion: http_floor.c's HTTP (the same answers, from
 * http_answer.h) on io_uring(7) through liburing, with nothing but the kernel
 * in the way.  Where http_floor.c asks epoll which sockets are ready and then
 * calls recv and send itself, this one hands the kernel the operations and
 * reaps their completions, one io_uring_enter(2) a turn for every connection:
 *
 *   multishot accept (5.19)   one SQE on the listener, a CQE per connection
 *   multishot receive (6.0)   one SQE per connection, a CQE each time data
 *                             arrives, in a buffer the kernel takes from a
 *                             provided-buffer ring (BUFFERS x BUFFER_SIZE,
 *                             shared by every connection) and names in the
 *                             CQE's flags
 *   send, shutdown, close     one SQE each, as the answers require
 *
 * It is the C twin of the uring-multishot stage (tinyloop/raw/
 * uring_multishot_server.py), and keeps its rules:
 *   * A buffer handed to the kernel is the kernel's until its completion.
 *     Responses made while a send is outstanding are appended after the
 *     bytes being sent, never over them; the sent prefix is dropped only
 *     at the send's completion.
 *   * A provided buffer is given back to the ring as soon as its bytes are
 *     copied into the connection's input.  While the input is full (the
 *     client pipelines faster than it reads the answers) the buffers wait
 *     in the connection's list, in order, and the armed receive is
 *     cancelled: that is backpressure, as in the Python stage.
 *   * An operation whose CQE lacks IORING_CQE_F_MORE has ended, whatever
 *     its result, and is submitted again if it is still wanted (a multishot
 *     receive ends at EOF, on an error, when cancelled, and with -ENOBUFS
 *     when the ring had no free buffer).
 *   * user_data is the connection's address with the operation's kind in
 *     its low three bits.  A connection is freed only at its close's
 *     completion, which comes after its receive's and send's last CQEs; the
 *     CQEs of a cancel or a shutdown may come later, and are never traced
 *     back to their connection.
 *
 * The ring is set up with IORING_SETUP_SINGLE_ISSUER and DEFER_TASKRUN where
 * the kernel has them (6.1), as the Python stage's is: completion work runs
 * only inside our io_uring_enter calls.
 *
 * Build: cc -O2 -o http_uring_floor http_uring_floor.c -luring  (liburing-dev)
 * Usage: http_uring_floor [--port N]   (0 lets the kernel pick; default 8000)
 * Prints "tinyloop: serving c-uring on http://127.0.0.1:PORT/" once it
 * listens; SIGTERM or SIGINT ends it with exit code 0.  Where io_uring is
 * missing or refused it says why in one line and exits 1.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

#include "listener.h"

#define IN_SIZE 8192           /* the largest request head we accept */
#define OUT_SIZE 65536         /* responses waiting to be sent */
#define ENTRIES 256            /* submission queue; the completion queue has 4x */
#define BUFFERS 256            /* provided buffers: a power of two */
#define BUFFER_SIZE (16 * 1024)
#define GROUP 1                /* the buffer group the receives name */
#define NONE (-1)              /* the end of a connection's list of held buffers */

/* The kind of operation, in user_data's low bits. */
enum { ACCEPT, RECV, SEND, SHUTDOWN, CLOSE, CANCEL, TIMER };
#define KIND_MASK 7u

struct conn {
    int fd;                    /* -1 once its close is submitted */
    int closing;               /* close once `out` is sent */
    int eof;                   /* the peer has finished sending, and all it sent is in `in` */
    int peer_done;             /* the receive saw EOF: eof once the held buffers are read */
    int failed;                /* the peer reset, or a send failed */
    int receiving;             /* the multishot receive is armed */
    int cancelling;            /* a cancel of it is outstanding */
    int held_first, held_last; /* provided buffers received, not yet copied into `in` */
    size_t in_len;
    size_t out_len;            /* responses made */
    size_t sending;            /* how many of them, from out's start, the kernel is sending */
    char in[IN_SIZE];
    char out[OUT_SIZE];
};

#include "http_answer.h"   /* respond, answer, parse: on the struct above */

static struct io_uring ring;
static struct io_uring_buf_ring *buffers;
static char *buffer_memory;
/* A connection's held buffers, as a list threaded through these arrays by buffer id. */
static int held_next[BUFFERS];
static unsigned held_start[BUFFERS], held_end[BUFFERS];
static int listener = -1;
static long open_conns = 0;
/* Out of descriptors: accept again after this (asyncio's and the stages' 1 s). */
static struct __kernel_timespec rest = {.tv_sec = 1};

/* The next free SQE; a full submission queue is submitted first. */
static struct io_uring_sqe *sqe_for(void *ptr, unsigned kind) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);  /* the kernel took them all: SUBMIT_ALL */
    }
    io_uring_sqe_set_data64(sqe, (__u64)(uintptr_t)ptr | kind);
    return sqe;
}

static void arm_accept(void) {
    io_uring_prep_multishot_accept(sqe_for(NULL, ACCEPT), listener, NULL, NULL, SOCK_CLOEXEC);
}

static void arm_recv(struct conn *c) {
    struct io_uring_sqe *sqe = sqe_for(c, RECV);
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = GROUP;
    c->receiving = 1;
}

static void recycle(int bid) {
    io_uring_buf_ring_add(buffers, buffer_memory + (size_t)bid * BUFFER_SIZE, BUFFER_SIZE, (unsigned short)bid,
                          io_uring_buf_ring_mask(BUFFERS), 0);
    io_uring_buf_ring_advance(buffers, 1);
}

/* Copy held buffers into `in` while it has room, giving each back once read. */
static void take_held(struct conn *c) {
    while (c->held_first != NONE && c->in_len < IN_SIZE) {
        int bid = c->held_first;
        size_t n = held_end[bid] - held_start[bid];
        if (n > IN_SIZE - c->in_len)
            n = IN_SIZE - c->in_len;
        memcpy(c->in + c->in_len, buffer_memory + (size_t)bid * BUFFER_SIZE + held_start[bid], n);
        c->in_len += n;
        held_start[bid] += (unsigned)n;
        if (held_start[bid] == held_end[bid]) {
            c->held_first = held_next[bid];
            if (c->held_first == NONE)
                c->held_last = NONE;
            recycle(bid);
        }
    }
    if (c->peer_done && c->held_first == NONE)
        c->eof = 1;
}

/* Hand the kernel what waits in `out`, if no send is outstanding. */
static void flush(struct conn *c) {
    if (c->sending || c->out_len == 0 || c->failed)
        return;
    c->sending = c->out_len;
    io_uring_prep_send(sqe_for(c, SEND), c->fd, c->out, c->sending, MSG_NOSIGNAL);
}

/* Close `c` once nothing of it is outstanding (progress() cancels its receive). */
static void close_conn(struct conn *c) {
    if (c->receiving)
        return;  /* progress() has cancelled it; its last CQE comes back here */
    if (c->sending || c->fd < 0)
        return;  /* the send's completion, or the close's, comes back here */
    if (!c->failed) {
        /* FIN after the last answer, then the close, hard-linked: the close
         * runs even when the shutdown fails (a peer that reset). */
        struct io_uring_sqe *sqe = sqe_for(NULL, SHUTDOWN);
        io_uring_prep_shutdown(sqe, c->fd, SHUT_WR);
        sqe->flags |= IOSQE_IO_HARDLINK;
    }
    io_uring_prep_close(sqe_for(c, CLOSE), c->fd);
    c->fd = -1;
}

/* After any completion of `c`: answer what can be answered, send, then
 * receive again, hold back, or close. */
static void progress(struct conn *c) {
    if (c->fd < 0)
        return;  /* its close is outstanding */
    if (!c->failed) {
        for (;;) {
            size_t before = c->in_len;
            take_held(c);
            size_t taken = c->in_len - before;
            before = c->in_len;
            parse(c);
            if (!taken && c->in_len == before)
                break;  /* nothing more fits, or nothing more to answer */
        }
        flush(c);
    }
    int done = c->failed || ((c->closing || c->eof) && !c->sending && c->out_len == 0);
    int wants_read = !done && !c->closing && !c->peer_done && c->held_first == NONE;
    if (!wants_read && c->receiving && !c->cancelling) {
        c->cancelling = 1;  /* backpressure, or a close to come: stop the armed receive */
        io_uring_prep_cancel64(sqe_for(NULL, CANCEL), (__u64)(uintptr_t)c | RECV, 0);
    }
    if (done)
        close_conn(c);  /* a half request at EOF gets no answer */
    else if (wants_read && !c->receiving)
        arm_recv(c);
}

static void on_recv(struct conn *c, int res, unsigned flags) {
    if (!(flags & IORING_CQE_F_MORE))
        c->receiving = c->cancelling = 0;  /* ended: progress() arms it again if wanted */
    if (flags & IORING_CQE_F_BUFFER) {
        int bid = (int)(flags >> IORING_CQE_BUFFER_SHIFT);
        held_start[bid] = 0;
        held_end[bid] = (unsigned)res;
        held_next[bid] = NONE;
        if (c->held_last == NONE)
            c->held_first = bid;
        else
            held_next[c->held_last] = bid;
        c->held_last = bid;
    } else if (res == 0)
        c->peer_done = 1;
    else if (res < 0 && res != -ENOBUFS && res != -ECANCELED)
        c->failed = 1;  /* ECONNRESET and friends */
    progress(c);
}

static void on_send(struct conn *c, int res) {
    size_t sent = res < 0 ? 0 : (size_t)res;
    if (res < 0)
        c->failed = 1;  /* EPIPE, ECONNRESET: the peer reads no more */
    /* Nothing is outstanding now: drop the sent prefix, keep the rest. */
    memmove(c->out, c->out + sent, c->out_len - sent);
    c->out_len -= sent;
    c->sending = 0;
    progress(c);
}

static void on_closed(struct conn *c) {
    for (int bid = c->held_first; bid != NONE; bid = held_next[bid])
        recycle(bid);
    free(c);
    open_conns--;
}

static void on_accept(int res, unsigned flags) {
    if (res >= 0) {
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            close(res);
        } else {
            memset(c, 0, offsetof(struct conn, in));
            c->fd = res;
            c->held_first = c->held_last = NONE;
            open_conns++;
            arm_recv(c);
        }
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
static int setup(void) {
    struct io_uring_params params = {.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL
                                              | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
                                     .cq_entries = 4 * ENTRIES};
    int err = io_uring_queue_init_params(ENTRIES, &ring, &params);
    if (err == -EINVAL) {  /* a kernel before 6.1 */
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

int main(int argc, char **argv) {
    listener = floor_listen(argc, argv);
    if (listener < 0)
        return listener == -2 ? 2 : 1;
    /* Linux copies TCP_NODELAY from a listener to the sockets it accepts:
     * a connection then costs no system call of its own. */
    int one = 1;
    setsockopt(listener, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int err = setup();
    if (err < 0) {
        fprintf(stderr, "tinyloop: c-uring: io_uring cannot be used here: %s%s\n", strerror(-err),
                err == -EPERM ? " (io_uring_disabled, or a seccomp filter)" : "");
        return 1;
    }
    floor_announce("c-uring", listener);

    /* This loop is the whole event loop: submit, wait for completions, act on them. */
    while (!stopping) {
        err = io_uring_submit_and_wait(&ring, 1);
        if (err < 0 && err != -EINTR && err != -EAGAIN && err != -EBUSY) {
            fprintf(stderr, "tinyloop: c-uring: io_uring_enter: %s\n", strerror(-err));
            break;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            unsigned kind = (unsigned)(cqe->user_data & KIND_MASK);
            struct conn *c = (struct conn *)(uintptr_t)(cqe->user_data & ~(__u64)KIND_MASK);
            switch (kind) {
            case ACCEPT: on_accept(cqe->res, cqe->flags); break;
            case TIMER: arm_accept(); break;
            case RECV: on_recv(c, cqe->res, cqe->flags); break;
            case SEND: on_send(c, cqe->res); break;
            case CLOSE: on_closed(c); break;
            default: break;  /* SHUTDOWN and CANCEL: their targets' CQEs tell the story */
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
    /* The armed accept holds the listener until the kernel tears the ring
     * down, after exit: shutdown(2) stops the listening now, so the port is
     * free when we are gone.  Connections still open are closed by exit(3). */
    shutdown(listener, SHUT_RDWR);
    io_uring_queue_exit(&ring);
    close(listener);
    fprintf(stderr, "tinyloop: c-uring: stopped (%ld connections open)\n", open_conns);
    return 0;
}
