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
 * The listener, the accept loop and main() are http_floor.c's, repeated here
 * on purpose: each floor is one file that builds with one cc command.
 *
 * Build: cc -O2 -o echo_floor echo_floor.c
 * Usage: echo_floor [--port N]   (0 lets the kernel pick; default 8000)
 * Prints "tinyloop: serving echo-c-epoll on http://127.0.0.1:PORT/" once it
 * listens (the launcher's announce line, shared with the HTTP servers: the
 * port is what it reads); SIGTERM or SIGINT ends it with exit code 0.
 */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "watch.h"

#define BUF_SIZE (256 * 1024)
#define MAX_EVENTS 256

struct conn {
    int fd;
    unsigned events;           /* what epoll watches for: EPOLLIN or EPOLLOUT */
    size_t len, sent;          /* bytes in buf, and how many of them went back */
    char buf[BUF_SIZE];
};

static volatile sig_atomic_t stopping = 0;
static int epfd = -1;
static long open_conns = 0;

static void on_signal(int signum) { (void)signum; stopping = 1; }

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

static void on_acceptable(int listener) {
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                perror("tinyloop: accept");
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->len = c->sent = 0;
        c->events = EPOLLIN;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        open_conns++;
    }
}

int main(int argc, char **argv) {
    int port = 8000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--port N]\n", argv[0]);
            return 2;
        }
    }
    struct sigaction sa = {.sa_handler = on_signal};  /* no SA_RESTART: epoll_wait returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t addr_len = sizeof addr;
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) < 0
        || listen(listener, 1024) < 0 || getsockname(listener, (struct sockaddr *)&addr, &addr_len) < 0) {
        perror("tinyloop: cannot listen");
        return 1;
    }
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &ev);
    printf("tinyloop: serving echo-c-epoll on http://127.0.0.1:%d/\n", ntohs(addr.sin_port));
    fflush(stdout);

    /* This loop is the whole event loop: wait for readiness, act on it. */
    struct epoll_event events[MAX_EVENTS];
    while (!stopping) {
        int n = epoll_wait(epfd, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("tinyloop: epoll_wait");
            break;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c == NULL)
                on_acceptable(listener);
            else if (c->events == EPOLLOUT)
                flush(c);
            else
                on_readable(c);
        }
    }
    close(epfd);
    close(listener);
    fprintf(stderr, "tinyloop: echo-c-epoll: stopped (%ld connections open)\n", open_conns);
    return 0;
}
