/* benchmarks/peers/c/echo_uring_floor.c
 *
 * The completion floor under the echo benchmark: echo_floor.c's TCP echo on
 * io_uring(7) through liburing, with nothing but the kernel in the way.  The
 * ring, the armed accept and the multishot receive on provided buffers are
 * uring_floor.h's, shared with http_uring_floor.c; this file says what a
 * connection does: send back each buffer the kernel filled, from that very
 * buffer (no copy), and give it back to the ring once the send completes.
 *
 * Rules it keeps, the same as every echo peer's (benchmarks/echo.py):
 *   * Every byte that arrives goes back, in order, on the same connection:
 *     one send outstanding at a time, of the oldest held buffer, from where
 *     the last (perhaps partial) send stopped.
 *   * Backpressure: while HIGH_WATER_BUFFERS buffers wait to go back to a
 *     peer that does not read, its armed receive is cancelled, so it cannot
 *     make the server buffer without bound; it is armed again when they have
 *     gone.
 *   * An end of file (or an error) from the peer closes the connection,
 *     after what arrived before it has gone back.
 * Buffers of 256 KiB, as echo_floor.c's: the most asyncio's selector
 * transport reads at once, so a 100 KiB message is one receive and one send.
 *
 * Build: cc -O2 -o echo_uring_floor echo_uring_floor.c -luring  (liburing-dev)
 * Usage: echo_uring_floor [--port N]   (0 lets the kernel pick; default 8000)
 * Prints "tinyloop: serving echo-c-uring on http://127.0.0.1:PORT/" once it
 * listens (the launcher's announce line); SIGTERM or SIGINT ends it with exit
 * code 0.  Where io_uring is missing or refused it says why and exits 1.
 */

#define _GNU_SOURCE
#define BUFFERS 64             /* 16 MiB in all, touched as traffic needs it */
#define BUFFER_SIZE (256 * 1024)
#include "uring_floor.h"

#define HIGH_WATER_BUFFERS 2   /* one buffer being sent, one waiting: then stop receiving */

struct conn {
    struct uring_conn u;       /* fd, the receive and what it holds (uring_floor.h) */
    int sending;               /* a send of the oldest held buffer is outstanding */
};

/* After any completion: send back the oldest held bytes, then receive again,
 * hold back (HIGH_WATER_BUFFERS held), or close (after EOF, once all that
 * came before it has gone back). */
static void uring_progress(void *conn) {
    struct conn *c = conn;
    if (c->u.fd < 0)
        return;  /* its close is outstanding */
    const char *data;
    size_t n;
    if (!c->u.failed && !c->sending && (n = held_peek(&c->u.held, &data)) > 0) {
        io_uring_prep_send(sqe_for(c, SEND), c->u.fd, data, n, MSG_NOSIGNAL);
        c->sending = 1;
    }
    int done = c->u.failed || (c->u.peer_done && c->u.held.count == 0);
    uring_conn_next(&c->u, done, c->u.held.count < HIGH_WATER_BUFFERS, c->sending);
}

static void uring_sent(void *conn, int res) {
    struct conn *c = conn;
    c->sending = 0;
    if (res < 0)
        c->u.failed = 1;  /* EPIPE, ECONNRESET: the peer reads no more */
    else
        held_used(&c->u.held, (size_t)res);  /* the kernel is done with those bytes */
    uring_progress(c);
}

static void *uring_accepted(int fd) { return uring_conn_new(sizeof(struct conn), sizeof(struct conn), fd); }

int main(int argc, char **argv) { return uring_floor_main(argc, argv, "echo-c-uring"); }
