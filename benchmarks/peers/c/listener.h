/* benchmarks/peers/c/listener.h
 *
 * How every C floor starts and stops, whatever it waits with (floor.h's
 * epoll loop, http_uring_floor.c's io_uring loop): the command line
 * [--port N] (0 lets the kernel pick; default 8000), the stop signals, the
 * listener on 127.0.0.1, and the announce line the launcher reads.
 *
 *   int floor_listen(int argc, char **argv);
 *       a bound, listening, non-blocking socket; -2 after a usage error,
 *       -1 when it cannot listen (both said on stderr).
 *   void floor_announce(const char *name, int listener);
 *       prints "tinyloop: serving NAME on http://127.0.0.1:PORT/".
 *   stopping
 *       set by SIGTERM or SIGINT; the floor's loop ends when it sees it.
 */
#ifndef TINYLOOP_LISTENER_H
#define TINYLOOP_LISTENER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static volatile sig_atomic_t stopping = 0;

static void on_signal(int signum) { (void)signum; stopping = 1; }

static int floor_listen(int argc, char **argv) {
    int port = 8000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--port N]\n", argv[0]);
            return -2;
        }
    }
    struct sigaction sa = {.sa_handler = on_signal};  /* no SA_RESTART: the wait returns EINTR */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(listener, 1024) < 0) {
        perror("tinyloop: cannot listen");
        return -1;
    }
    return listener;
}

static void floor_announce(const char *name, int listener) {
    struct sockaddr_in addr;
    socklen_t addr_len = sizeof addr;
    getsockname(listener, (struct sockaddr *)&addr, &addr_len);
    printf("tinyloop: serving %s on http://127.0.0.1:%d/\n", name, ntohs(addr.sin_port));
    fflush(stdout);
}

#endif
