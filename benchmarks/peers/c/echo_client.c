/* benchmarks/peers/c/echo_client.c
 *
 * The echo benchmark's load generator, in the shape of the uvloop
 * announcement's: N connections, each sending one message of S bytes and
 * waiting for the whole echo before it sends the next.  One thread, one
 * epoll(7) instance, non-blocking sockets: on one core it keeps ten
 * connections busy with far less CPU per message than any Python server
 * spends, so the server, not the client, sets the pace.
 *
 * Rules it keeps:
 *   * Every byte that comes back is checked against the byte that was sent
 *     at that offset; a wrong byte, an early end of file or an error counts
 *     as an error and closes that connection (the others go on).
 *   * It reads while it writes.  A 100 KiB message does not fit in the
 *     socket buffers of both directions at once, so a client that finished
 *     sending before reading could deadlock with a server that applies
 *     backpressure.
 *   * It never hangs: after --timeout seconds in which no message completed
 *     it stops, and says so.
 *   * A message counts when its last byte is back; messages still in flight
 *     when --duration ends are not counted.
 *
 * Build: cc -O2 -o echo_client echo_client.c
 * Usage: echo_client --port N [--host 127.0.0.1] [--size BYTES] [--connections N]
 *                    [--duration SECONDS] [--timeout SECONDS]
 * Prints one line, then exits 0 (1 when a connection failed to open):
 *   messages=M bytes=B seconds=T errors=E timeout=0|1 p50_us=X p99_us=Y cpu_s=C
 * bytes counts the echoed bytes received (one direction); p50/p99 are the
 * round-trip times of single messages, from the first byte sent to the last
 * byte received, in microseconds; cpu_s is the client's own user + system
 * CPU time (getrusage), which says whether the client kept up.
 */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "watch.h"

#define MAX_CONNS 1024
#define RECV_SIZE 65536

struct conn {
    int fd;
    unsigned events;
    size_t sent, received;     /* of the message in flight */
    double started;            /* when its first byte went out */
};

static char *message;          /* the bytes every connection sends */
static size_t size = 1024;
static int epfd;
static long long messages = 0, bytes = 0, errors = 0;
static uint32_t *samples;      /* round-trip times in ns, one per message (capped) */
static size_t n_samples = 0, cap_samples = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void want(struct conn *c, unsigned events) { watch(epfd, c->fd, c, &c->events, events); }

static void drop(struct conn *c) {
    errors++;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

/* Send what is left of the message; watch EPOLLOUT too while some is. */
static void pump(struct conn *c) {
    while (c->sent < size) {
        ssize_t n = send(c->fd, message + c->sent, size - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            drop(c);
            return;
        }
        c->sent += (size_t)n;
    }
    want(c, c->sent < size ? EPOLLIN | EPOLLOUT : EPOLLIN);
}

static void start_message(struct conn *c) {
    c->sent = c->received = 0;
    c->started = now();
    pump(c);
}

static void on_readable(struct conn *c, char *buf) {
    ssize_t n = recv(c->fd, buf, RECV_SIZE, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    /* An end of file, an error, more bytes than were sent, or wrong bytes. */
    if (n <= 0 || c->received + (size_t)n > c->sent
        || memcmp(buf, message + c->received, (size_t)n) != 0) {
        drop(c);
        return;
    }
    c->received += (size_t)n;
    if (c->received < size)
        return;
    double took = now() - c->started;
    messages++;
    bytes += (long long)size;
    if (n_samples == cap_samples && cap_samples < (1u << 26)) {
        cap_samples = cap_samples ? cap_samples * 2 : 65536;
        uint32_t *grown = realloc(samples, cap_samples * sizeof *samples);
        if (grown)
            samples = grown;
        else
            cap_samples = n_samples;
    }
    if (n_samples < cap_samples)
        samples[n_samples++] = took * 1e9 > 4e9 ? 4000000000u : (uint32_t)(took * 1e9);
    start_message(c);
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static double percentile_us(double p) {
    if (n_samples == 0)
        return -1;
    size_t i = (size_t)(p * (double)(n_samples - 1) + 0.5);
    return samples[i] / 1000.0;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 0, nconns = 10;
    double duration = 5, timeout = 5;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (value && strcmp(arg, "--host") == 0) host = value;
        else if (value && strcmp(arg, "--port") == 0) port = atoi(value);
        else if (value && strcmp(arg, "--size") == 0) size = (size_t)atol(value);
        else if (value && strcmp(arg, "--connections") == 0) nconns = atoi(value);
        else if (value && strcmp(arg, "--duration") == 0) duration = atof(value);
        else if (value && strcmp(arg, "--timeout") == 0) timeout = atof(value);
        else {
            fprintf(stderr, "usage: %s --port N [--host H] [--size BYTES] [--connections N] "
                            "[--duration S] [--timeout S]\n", argv[0]);
            return 2;
        }
        i++;
    }
    if (port <= 0 || size < 1 || nconns < 1 || nconns > MAX_CONNS || duration <= 0 || timeout <= 0) {
        fprintf(stderr, "echo_client: need --port > 0, --size >= 1, 1 <= --connections <= %d, "
                        "--duration > 0, --timeout > 0\n", MAX_CONNS);
        return 2;
    }
    message = malloc(size);
    char *buf = malloc(RECV_SIZE);
    if (!message || !buf) {
        perror("echo_client: malloc");
        return 1;
    }
    for (size_t i = 0; i < size; i++)
        message[i] = (char)('a' + (i * 7 + i / 251) % 26);  /* no period that hides a shifted byte */

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "echo_client: --host must be an IPv4 address, got %s\n", host);
        return 2;
    }
    epfd = epoll_create1(EPOLL_CLOEXEC);
    static struct conn conns[MAX_CONNS];
    double begin = now();
    for (int i = 0; i < nconns; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
            perror("echo_client: connect");
            return 1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
            perror("echo_client: fcntl");
            return 1;
        }
        conns[i].fd = fd;
        conns[i].events = EPOLLIN;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conns[i]};
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }
    for (int i = 0; i < nconns; i++)
        start_message(&conns[i]);

    /* The client's own event loop: wait, then read and write what is ready. */
    double end = begin + duration, last_progress = begin;
    long long seen = 0;
    int timed_out = 0;
    struct epoll_event events[MAX_CONNS];
    for (;;) {
        double t = now();
        if (t >= end)
            break;
        if (messages != seen) {
            seen = messages;
            last_progress = t;
        } else if (t - last_progress >= timeout || errors == nconns) {
            timed_out = errors < nconns;
            break;
        }
        int wait_ms = (int)((end - t) * 1000) + 1;
        if (wait_ms > 100)
            wait_ms = 100;
        int n = epoll_wait(epfd, events, MAX_CONNS, wait_ms);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c->fd >= 0 && (events[i].events & EPOLLOUT))
                pump(c);
            if (c->fd >= 0 && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                on_readable(c, buf);
        }
    }
    double seconds = now() - begin;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double cpu = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6
                 + usage.ru_stime.tv_sec + usage.ru_stime.tv_usec * 1e-6;
    qsort(samples, n_samples, sizeof *samples, by_value);
    printf("messages=%lld bytes=%lld seconds=%.6f errors=%lld timeout=%d p50_us=%.1f p99_us=%.1f cpu_s=%.6f\n",
           messages, bytes, seconds, errors, timed_out, percentile_us(0.50), percentile_us(0.99), cpu);
    return 0;
}
