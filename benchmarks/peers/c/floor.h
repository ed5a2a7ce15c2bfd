/* benchmarks/peers/c/floor.h
 *
 * What the two C epoll floors (http_floor.c, echo_floor.c) share: the accept
 * loop and the event loop itself, on listener.h's listener and stop signals
 * (the io_uring floors' uring_floor.h stands on them too), so that each floor's file holds
 * only what it does with a connection.  A floor defines, after including
 * this file:
 *
 *   static void *floor_accepted(int fd);
 *       a new connection's state (its struct conn), or NULL to refuse it;
 *       epoll then watches fd for EPOLLIN, with that pointer as its data.
 *   static void floor_ready(void *conn, unsigned events);
 *       epoll reported ``events`` for that connection.
 *
 * and its main() returns floor_main(argc, argv, NAME).  Usage of a floor:
 * NAME [--port N] (0 lets the kernel pick; default 8000); it prints
 * "tinyloop: serving NAME on http://127.0.0.1:PORT/" once it listens (the
 * launcher's announce line); SIGTERM or SIGINT ends it with exit code 0.
 */
#ifndef TINYLOOP_FLOOR_H
#define TINYLOOP_FLOOR_H

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

#include "listener.h"

#define FLOOR_MAX_EVENTS 256

static int epfd = -1;
static long open_conns = 0;    /* a floor counts its closes down */

static void *floor_accepted(int fd);
static void floor_ready(void *conn, unsigned events);

static void on_acceptable(int listener) {
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                perror("tinyloop: accept");  /* EMFILE: the others wait in the backlog */
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        void *c = floor_accepted(fd);
        if (!c) {
            close(fd);
            continue;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        open_conns++;
    }
}

static int floor_main(int argc, char **argv, const char *name) {
    int listener = floor_listen(argc, argv);
    if (listener < 0)
        return listener == -2 ? 2 : 1;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, listener, &ev);
    floor_announce(name, listener);

    /* This loop is the whole event loop: wait for readiness, act on it. */
    struct epoll_event events[FLOOR_MAX_EVENTS];
    while (!stopping) {
        int n = epoll_wait(epfd, events, FLOOR_MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("tinyloop: epoll_wait");
            break;
        }
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == NULL)
                on_acceptable(listener);
            else
                floor_ready(events[i].data.ptr, events[i].events);
        }
    }
    /* Connections still open are closed by exit(3), which returns every
     * descriptor to the kernel; the count below says how many there were. */
    close(epfd);
    close(listener);
    fprintf(stderr, "tinyloop: %s: stopped (%ld connections open)\n", name, open_conns);
    return 0;
}

#endif
