/* benchmarks/peers/c/http_floor.c
 *
 * The floor under every row of the benchmark table: how fast this machine
 * answers "GET /" when nothing but the kernel stands in the way.  One thread,
 * one epoll(7) instance, level-triggered, non-blocking sockets, no allocation
 * on the request path beyond one struct per connection.
 *
 * It is not a general HTTP server.  It answers what the benchmark sends:
 *   GET /            200 "Hello, World!\n" (the body every stage serves)
 *   any other path   404
 *   a request body   501 and close (the floor does not read bodies)
 *   malformed input  400 and close; a head over 8 KiB: 431 and close
 * Keep-alive follows RFC 9112 section 9.3: HTTP/1.1 stays open unless the
 * client says "Connection: close"; HTTP/1.0 stays open only if it says
 * "Connection: keep-alive" (as ApacheBench's -k does).  Pipelined requests
 * are answered in order, in as few send(2) calls as the buffer allows.
 *
 * Build: cc -O2 -o http_floor http_floor.c
 * Usage: http_floor [--port N]   (0 lets the kernel pick; default 8000)
 * Prints "tinyloop: serving c-epoll on http://127.0.0.1:PORT/" once it
 * listens; SIGTERM or SIGINT closes every socket and exits 0.
 */

#define _GNU_SOURCE
#include "floor.h"
#include "watch.h"

#define IN_SIZE 8192           /* the largest request head we accept */
#define OUT_SIZE 65536         /* responses waiting to be sent */

struct conn {
    int fd;
    int closing;               /* close once `out` is flushed */
    int eof;                   /* the peer has finished sending */
    unsigned events;           /* what epoll watches for: EPOLLIN or EPOLLOUT */
    size_t in_len;
    size_t out_len, out_sent;
    char in[IN_SIZE];
    char out[OUT_SIZE];
};

#include "http_answer.h"   /* respond, answer, parse: on the struct above */

static void conn_close(struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
    open_conns--;
}

static void want(struct conn *c, unsigned events) { watch(epfd, c->fd, c, &c->events, events); }

/* Send what is buffered.  Returns 0 when all of it went, 1 when the socket
 * is full (wait for EPOLLOUT), -1 when the peer is gone. */
static int flush(struct conn *c) {
    while (c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
        }
        c->out_sent += (size_t)n;
    }
    c->out_len = c->out_sent = 0;
    return 0;
}

/* Parse, answer, send, until the input holds no whole request or the socket
 * is full.  Frees `c` if the connection ends. */
static void progress(struct conn *c) {
    for (;;) {
        size_t before = c->in_len;
        parse(c);
        int sent = flush(c);
        if (sent < 0 || (sent == 0 && c->closing)) {
            conn_close(c);
            return;
        }
        if (sent == 1) {
            want(c, EPOLLOUT);  /* stop reading until the client reads */
            return;
        }
        if (c->in_len == before || c->in_len == 0)
            break;  /* nothing more to answer */
    }
    if (c->eof) {
        conn_close(c);  /* a half request at EOF gets no answer */
        return;
    }
    want(c, EPOLLIN);
}

static void on_readable(struct conn *c) {
    ssize_t n = recv(c->fd, c->in + c->in_len, IN_SIZE - c->in_len, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        conn_close(c);
        return;
    }
    if (n == 0)
        c->eof = 1;
    c->in_len += (size_t)n;
    progress(c);
}

static void *floor_accepted(int fd) {
    struct conn *c = malloc(sizeof *c);
    if (c) {
        c->fd = fd;
        c->closing = c->eof = 0;
        c->in_len = c->out_len = c->out_sent = 0;
        c->events = EPOLLIN;
    }
    return c;
}

static void floor_ready(void *conn, unsigned events) {
    if (events & EPOLLOUT)
        progress(conn);
    else
        on_readable(conn);
}

int main(int argc, char **argv) { return floor_main(argc, argv, "c-epoll"); }
