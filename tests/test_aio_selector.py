# tests/test_aio_selector.py
#
# tinyloop.aio's default selector on Linux (selector_events._EpollSelector)
# rewrites selectors.EpollSelector.select() to do less per ready descriptor.
# It must answer exactly as the standard library's does: the same keys, the
# same event bits, an error or a hang-up reported as both bits masked by
# what the key asked for, and the same timeouts.

from __future__ import annotations

import os
import selectors
import socket
import time

import pytest

from tinyloop.aio import new_event_loop, selector_events

pytestmark = pytest.mark.skipif(not hasattr(selectors, "EpollSelector"), reason="needs epoll")


def answers(selector: selectors.BaseSelector, timeout: float | None = 0) -> list[tuple[int, int, str]]:
    """select()'s answer as (fd, events, data), sorted: comparable across two selectors."""
    return sorted((key.fd, events, key.data) for key, events in selector.select(timeout))


@pytest.fixture()
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("situation", ["idle", "readable", "peer-closed", "closed-unread"])
@pytest.mark.parametrize("interest", [selectors.EVENT_READ, selectors.EVENT_WRITE,
                                      selectors.EVENT_READ | selectors.EVENT_WRITE],
                         ids=["read", "write", "both"])
def test_the_short_select_answers_as_the_standard_librarys(pair, situation, interest) -> None:
    a, b = pair
    if situation == "readable":
        b.send(b"x")
    elif situation == "peer-closed":
        b.close()  # a hang-up: EPOLLIN | EPOLLHUP on a
    elif situation == "closed-unread":
        b.send(b"unread")
        a.close()  # a closes with data left unread: watch b, the side that is told
        a, b = b, a
    ours, theirs = selector_events._EpollSelector(), selectors.EpollSelector()
    try:
        for selector in (ours, theirs):
            selector.register(a, interest, "a")
        assert answers(ours) == answers(theirs)
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("interest", [selectors.EVENT_READ, selectors.EVENT_WRITE,
                                      selectors.EVENT_READ | selectors.EVENT_WRITE],
                         ids=["read", "write", "both"])
def test_a_hang_up_alone_counts_as_both_events_masked_by_the_interest(interest) -> None:
    # A pipe's read end whose writer closed reports EPOLLHUP and nothing
    # else (pipe(7)): selectors calls that readable and writable.
    read_end, write_end = os.pipe()
    os.close(write_end)
    ours, theirs = selector_events._EpollSelector(), selectors.EpollSelector()
    try:
        for selector in (ours, theirs):
            selector.register(read_end, interest, "r")
        assert answers(ours) == answers(theirs) == [(read_end, interest, "r")]
    finally:
        ours.close()
        theirs.close()
        os.close(read_end)


def test_a_descriptor_unregistered_before_select_is_not_reported(pair) -> None:
    a, b = pair
    b.send(b"x")
    selector = selector_events._EpollSelector()
    try:
        selector.register(a, selectors.EVENT_READ, "a")
        selector.register(b, selectors.EVENT_WRITE, "b")
        selector.unregister(a)
        assert answers(selector) == [(b.fileno(), selectors.EVENT_WRITE, "b")]
    finally:
        selector.close()


def test_a_descriptor_closed_before_it_was_unregistered_is_not_reported(pair) -> None:
    # epoll watches the open file, not the number: closed while a duplicate
    # keeps the file open, the descriptor stays in epoll's list after
    # unregister() (whose EPOLL_CTL_DEL fails with EBADF, ignored), and epoll
    # goes on reporting its old number, which no key has any more.
    a, b = pair
    b.send(b"x")
    duplicate = a.dup()
    fd = a.fileno()
    ours, theirs = selector_events._EpollSelector(), selectors.EpollSelector()
    try:
        for selector in (ours, theirs):
            selector.register(fd, selectors.EVENT_READ, "a")
        a.close()
        for selector in (ours, theirs):
            selector.unregister(fd)
        assert answers(theirs) == answers(ours) == []
        assert [fd for fd, _ in ours._selector.poll(0)] == [fd], "epoll still reports the old number"
    finally:
        ours.close()
        theirs.close()
        duplicate.close()


@pytest.mark.parametrize("timeout", [0, -1, 0.0004])
def test_a_short_or_negative_timeout_returns_without_a_ready_descriptor(pair, timeout) -> None:
    a, _ = pair
    selector = selector_events._EpollSelector()
    try:
        selector.register(a, selectors.EVENT_READ, "a")
        start = time.monotonic()
        assert selector.select(timeout) == []
        # 0.4 ms is rounded up to epoll's whole millisecond, never down to 0.
        assert time.monotonic() - start >= (0.001 if timeout > 0 else 0)
    finally:
        selector.close()


def test_the_loop_gets_the_short_select_unless_given_a_selector() -> None:
    loop = new_event_loop()
    given = new_event_loop(selector=selectors.PollSelector())
    try:
        assert type(loop._selector) is selector_events._EpollSelector
        assert type(given._selector) is selectors.PollSelector
    finally:
        loop.close()
        given.close()
