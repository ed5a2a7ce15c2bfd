/* benchmarks/peers/c/http_uring_floor.c
 *
 * The floor under completion: http_floor.c's HTTP (the same answers, from
 * http_answer.h) on io_uring(7) through liburing, with nothing but the kernel
 * in the way.  Where http_floor.c asks epoll which sockets are ready and then
 * calls recv and send itself, this one hands the kernel the operations and
 * reaps their completions, one io_uring_enter(2) a turn for every connection:
 * a multishot accept, a multishot receive per connection on a shared ring of
 * provided buffers, and a send, shutdown and close as the answers require
 * (uring_floor.h, shared with echo_uring_floor.c).
 *
 * It is the C twin of the uring-multishot stage (tinyloop/raw/
 * uring_multishot_server.py), and keeps its rules:
 *   * A buffer handed to the kernel is the kernel's until its completion.
 *     Responses made while a send is outstanding are appended after the
 *     bytes being sent, never over them; the sent prefix is dropped only
 *     at the send's completion.
 *   * A received buffer is given back to the ring as soon as its bytes are
 *     copied into the connection's input.  While the input is full (the
 *     client pipelines faster than it reads the answers) the buffers wait
 *     in the connection's list, in order, and the armed receive is
 *     cancelled: that is backpressure, as in the Python stage.
 *
 * Build: cc -O2 -o http_uring_floor http_uring_floor.c -luring  (liburing-dev)
 * Usage: http_uring_floor [--port N]   (0 lets the kernel pick; default 8000)
 * Prints "tinyloop: serving c-uring on http://127.0.0.1:PORT/" once it
 * listens; SIGTERM or SIGINT ends it with exit code 0.  Where io_uring is
 * missing or refused it says why in one line and exits 1.
 */

#define _GNU_SOURCE
#include <stddef.h>

#include "uring_floor.h"

#define IN_SIZE 8192           /* the largest request head we accept */
#define OUT_SIZE 65536         /* responses waiting to be sent */

struct conn {
    struct uring_conn u;       /* fd, the receive and what it holds (uring_floor.h) */
    int closing;               /* close once `out` is sent */
    int eof;                   /* the peer has finished sending, and all it sent is in `in` */
    size_t in_len;
    size_t out_len;            /* responses made */
    size_t sending;            /* how many of them, from out's start, the kernel is sending */
    char in[IN_SIZE];
    char out[OUT_SIZE];
};

#include "http_answer.h"   /* respond, answer, parse: on the struct above */

/* Copy held buffers into `in` while it has room, giving each back once read. */
static void take_held(struct conn *c) {
    const char *data;
    size_t n;
    while (c->in_len < IN_SIZE && (n = held_peek(&c->u.held, &data)) > 0) {
        if (n > IN_SIZE - c->in_len)
            n = IN_SIZE - c->in_len;
        memcpy(c->in + c->in_len, data, n);
        c->in_len += n;
        held_used(&c->u.held, n);
    }
    if (c->u.peer_done && c->u.held.count == 0)
        c->eof = 1;
}

/* Hand the kernel what waits in `out`, if no send is outstanding. */
static void flush(struct conn *c) {
    if (c->sending || c->out_len == 0 || c->u.failed)
        return;
    c->sending = c->out_len;
    io_uring_prep_send(sqe_for(c, SEND), c->u.fd, c->out, c->sending, MSG_NOSIGNAL);
}

/* After any completion: answer what can be answered, send, then receive
 * again, hold back (while input waits that `in` cannot take), or close (a
 * half request at EOF gets no answer). */
static void uring_progress(void *conn) {
    struct conn *c = conn;
    if (c->u.fd < 0)
        return;  /* its close is outstanding */
    if (!c->u.failed) {
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
    int done = c->u.failed || ((c->closing || c->eof) && !c->sending && c->out_len == 0);
    uring_conn_next(&c->u, done, !c->closing && c->u.held.count == 0, c->sending != 0);
}

static void uring_sent(void *conn, int res) {
    struct conn *c = conn;
    size_t sent = res < 0 ? 0 : (size_t)res;
    if (res < 0)
        c->u.failed = 1;  /* EPIPE, ECONNRESET: the peer reads no more */
    /* Nothing is outstanding now: drop the sent prefix, keep the rest. */
    memmove(c->out, c->out + sent, c->out_len - sent);
    c->out_len -= sent;
    c->sending = 0;
    uring_progress(c);
}

static void *uring_accepted(int fd) { return uring_conn_new(sizeof(struct conn), offsetof(struct conn, in), fd); }

int main(int argc, char **argv) { return uring_floor_main(argc, argv, "c-uring"); }
