/* benchmarks/peers/c/http_answer.h
 *
 * The HTTP the C floors answer (http_floor.c on epoll, http_uring_floor.c on
 * io_uring), written once: parse() finds each complete request head in a
 * connection's input and answer() writes its response into the output, by
 * the rules http_floor.c's header lists (GET / hello, 404, 400/431/501 and
 * close, keep-alive per RFC 9112 section 9.3, pipelined requests in order).
 * No I/O here: the floors differ only in how bytes come in and go out.
 *
 * The includer defines, before including this file, a struct conn with:
 *   char in[N];  size_t in_len;     the received bytes not yet answered
 *   char out[M]; size_t out_len;    responses made; bytes from out_len on
 *                                   are free (M > MAX_RESPONSE)
 *   int closing;                    set here: close once `out` is sent
 *   int eof;                        the peer has finished sending (answers
 *                                   made after it say "Connection: close")
 * and defines _GNU_SOURCE before its first #include (memmem(3)).
 */
#ifndef TINYLOOP_HTTP_ANSWER_H
#define TINYLOOP_HTTP_ANSWER_H

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_RESPONSE 256       /* larger than any response below */

static const char HELLO[] = "Hello, World!\n";
static const char NOT_FOUND[] = "Not Found\n";

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
    int n = snprintf(c->out + c->out_len, sizeof c->out - c->out_len,
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
    while (!c->closing && sizeof c->out - c->out_len >= MAX_RESPONSE) {
        char *head = c->in + start;
        size_t avail = c->in_len - start;
        char *end = memmem(head, avail, "\r\n\r\n", 4);
        if (!end) {
            if (avail == sizeof c->in)
                respond(c, "1.1", 431, "request head too large\n", 0);
            break;
        }
        answer(c, head, (size_t)(end - head));
        start += (size_t)(end - head) + 4;
    }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
}

#endif
