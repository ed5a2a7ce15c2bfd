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
#include <strings.h>

#include "floor.h"
#include "watch.h"

#define IN_SIZE 8192           /* the largest request head we accept */
#define OUT_SIZE 65536         /* responses waiting to be sent */
#define MAX_RESPONSE 256       /* larger than any response below */

static const char HELLO[] = "Hello, World!\n";
static const char NOT_FOUND[] = "Not Found\n";

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

static void conn_close(struct conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
    open_conns--;
}

static void want(struct conn *c, unsigned events) { watch(epfd, c->fd, c, &c->events, events); }

/* Case-insensitive search for `needle` in the `len` bytes at `s`. */
static int contains_ci(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (strncasecmp(s + i, needle, n) == 0)
            return 1;
    return 0;
}

static void respond(struct conn *c, const char *version, int status, const char *body,
                    int keep_alive) {
    const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found"
                       : status == 400 ? "Bad Request" : status == 431
                       ? "Request Header Fields Too Large" : "Not Implemented";
    const char *connection = !keep_alive ? "Connection: close\r\n"
                           : strcmp(version, "1.0") == 0 ? "Connection: keep-alive\r\n" : "";
    int n = snprintf(c->out + c->out_len, OUT_SIZE - c->out_len,
                     "HTTP/%s %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\n%s\r\n%s",
                     version, status, reason, strlen(body), connection, body);
    c->out_len += (size_t)n;
    if (!keep_alive)
        c->closing = 1;
}

/* Answer one complete request head of `len` bytes (blank line excluded). */
static void answer(struct conn *c, const char *head, size_t len) {
    const char *line_end = memchr(head, '\n', len);
    size_t line_len = line_end ? (size_t)(line_end - head) : len;
    if (line_len && head[line_len - 1] == '\r')
        line_len--;
    /* "METHOD SP TARGET SP HTTP/1.x" */
    const char *sp1 = memchr(head, ' ', line_len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', line_len - (size_t)(sp1 + 1 - head)) : NULL;
    if (!sp2 || head + line_len - sp2 != 9 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0
        || (sp2[8] != '0' && sp2[8] != '1')) {
        respond(c, "1.1", 400, "malformed request line\n", 0);
        return;
    }
    const char *version = sp2[8] == '0' ? "1.0" : "1.1";
    const char *fields = head + line_len;
    size_t fields_len = len - line_len;
    if (contains_ci(fields, fields_len, "\ntransfer-encoding:")
        || (contains_ci(fields, fields_len, "\ncontent-length:")
            && !contains_ci(fields, fields_len, "\ncontent-length: 0\r"))) {
        respond(c, version, 501, "request bodies are not served here\n", 0);
        return;
    }
    int keep_alive;
    if (version[2] == '1')
        keep_alive = !contains_ci(fields, fields_len, "\nconnection: close");
    else
        keep_alive = contains_ci(fields, fields_len, "\nconnection: keep-alive");
    if (c->eof)
        keep_alive = 0;
    int root = (size_t)(sp2 - sp1) == 2 && sp1[1] == '/';
    int get = sp1 - head == 3 && memcmp(head, "GET", 3) == 0;
    if (root && get)
        respond(c, version, 200, HELLO, keep_alive);
    else
        respond(c, version, 404, NOT_FOUND, keep_alive);
}

/* Answer every complete request in `in` while `out` has room. */
static void parse(struct conn *c) {
    size_t start = 0;
    while (!c->closing && OUT_SIZE - c->out_len >= MAX_RESPONSE) {
        char *head = c->in + start;
        size_t avail = c->in_len - start;
        char *end = memmem(head, avail, "\r\n\r\n", 4);
        if (!end) {
            if (avail == IN_SIZE)
                respond(c, "1.1", 431, "request head too large\n", 0);
            break;
        }
        answer(c, head, (size_t)(end - head));
        start += (size_t)(end - head) + 4;
    }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
}

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
