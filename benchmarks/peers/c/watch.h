/* benchmarks/peers/c/watch.h
 *
 * One epoll(7) helper that the C floors and the echo client share: change
 * what epoll watches a descriptor for, with one epoll_ctl per change, not
 * per request.  ``current`` holds what it watches now (the caller's
 * connection keeps it); ``ptr`` comes back in the event's data.
 */
#ifndef TINYLOOP_WATCH_H
#define TINYLOOP_WATCH_H

#include <sys/epoll.h>

static void watch(int epfd, int fd, void *ptr, unsigned *current, unsigned events) {
    if (*current == events)
        return;
    *current = events;
    struct epoll_event ev = {.events = events, .data.ptr = ptr};
    epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}

#endif
