/* benchmarks/peers/c/echo_floor.c
 *
 * The floor under the echo benchmark: a TCP echo server with nothing but the
 * kernel in the way.  One thread, one epoll(7) instance, level-triggered,
 * non-blocking sockets, one fixed 256 KiB buffer per connection: the most
 * asyncio's selector transport reads at once (max_size), so a 100 KiB
 * message is one recv and one send here as there.  (With 64 KiB, the floor
 * paid two of each, and cost more CPU per 100 KiB message than asyncio.)
 *
 * Rules it keeps, the same as every echo peer's (benchmarks/echo.py):
 *   * Every byte that arrives goes back, in order, on the same connection.
 *   * Backpressure: while a connection's buffer holds bytes the peer has not
 *     taken yet, the server stops reading from it (epoll watches EPOLLOUT
 *     instead of EPOLLIN), so a client that does not read cannot make the
 *     server buffer without bound.
 *   * An end of file (or an error) from the peer closes the connection.
 *
 * The listener, the accept loop and the event loop are floor.h's, shared
 * with http_floor.c; this file says what a connection does.
 *
 * Build: cc -O2 -o echo_floor echo_floor.c
 * Usage: echo_floor [--port N]   (0 lets the kernel pick; default 8000)
 * Prints "tinyloop: serving echo-c-epoll on http://127.0.0.1:PORT/" once it
 * listens (the launcher's announce line, shared with the HTTP servers: the
 * port is what it reads); SIGTERM or SIGINT ends it with exit code 0.
 */

#define _GNU_SOURCE

#include "floor.h"
#include "watch.h"

#define BUF_SIZE (256 * 1024)

struct conn {
    int fd;
    unsigned events;           /* what epoll watches for: EPOLLIN or EPOLLOUT */
    size_t len, sent;          /* bytes in buf, and how many of them went back */
    char buf[BUF_SIZE];
};

static void conn_close(struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
    open_conns--;
}

static void want(struct conn *c, unsigned events) { watch(epfd, c->fd, c, &c->events, events); }

/* Send what the buffer holds; watch for EPOLLOUT while some is left. */
static void flush(struct conn *c) {
    while (c->sent < c->len) {
        ssize_t n = send(c->fd, c->buf + c->sent, c->len - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                want(c, EPOLLOUT);
                return;
            }
            conn_close(c);
            return;
        }
        c->sent += (size_t)n;
    }
    c->len = c->sent = 0;
    want(c, EPOLLIN);
}

static void on_readable(struct conn *c) {
    ssize_t n = recv(c->fd, c->buf, BUF_SIZE, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        conn_close(c);
        return;
    }
    if (n > 0) {
        c->len = (size_t)n;
        c->sent = 0;
        flush(c);
    }
}

static void *floor_accepted(int fd) {
    struct conn *c = malloc(sizeof *c);
    if (c) {
        c->fd = fd;
        c->len = c->sent = 0;
        c->events = EPOLLIN;
    }
    return c;
}

static void floor_ready(void *conn, unsigned events) {
    struct conn *c = conn;
    (void)events;
    if (c->events == EPOLLOUT)
        flush(c);
    else
        on_readable(c);
}

int main(int argc, char **argv) { return floor_main(argc, argv, "echo-c-epoll"); }
