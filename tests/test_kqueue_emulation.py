"""The kqueue emulation behaves as select.kqueue does.

Every test runs against the emulation (where epoll exists) and against the
real ``select.kqueue`` (where it exists, BSD and macOS), so the tests are
the definition of "faithful": what passes on both is what a reader may rely
on.  Tests that check the emulation's own choices (its errors for what it
does not emulate, its Linux-specific figures) say so in their names.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyloop.raw import kqueue_emulation as emulation

APIS = [pytest.param(emulation, id="emulated",
                     marks=pytest.mark.skipif(not hasattr(select, "epoll"), reason="needs epoll"))]
if hasattr(select, "kqueue"):
    APIS.append(pytest.param(select, id="native"))

needs_epoll = pytest.mark.skipif(not hasattr(select, "epoll"), reason="the emulation needs epoll")


@pytest.fixture(params=APIS)
def api(request):
    return request.param


@pytest.fixture
def kq(api):
    queue = api.kqueue()
    yield queue
    queue.close()


def ev(api, sock, filter, flags, udata=0):
    return api.kevent(sock, filter, flags, 0, 0, udata)


def poll(kq, maxevents=16, timeout=0):
    """The events of one control() call, as a set of (ident, filter)."""
    return {(e.ident, e.filter) for e in kq.control(None, maxevents, timeout)}


# -- kevent ---------------------------------------------------------------

def test_kevent_defaults_and_attributes(api, pair):
    a, _ = pair
    e = api.kevent(a.fileno())
    assert (e.ident, e.filter, e.flags, e.fflags, e.data, e.udata) == (a.fileno(), api.KQ_FILTER_READ,
                                                                     api.KQ_EV_ADD, 0, 0, 0)
    e = api.kevent(a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD | api.KQ_EV_CLEAR, fflags=1, data=2, udata=3)
    assert e.ident == a.fileno()  # an object with fileno() stands for its descriptor
    assert (e.filter, e.flags, e.fflags, e.data, e.udata) == (api.KQ_FILTER_WRITE, 0x21, 1, 2, 3)


def test_kevent_equality_and_order(api):
    assert api.kevent(5) == api.kevent(5)
    assert api.kevent(5) != api.kevent(5, api.KQ_FILTER_WRITE)
    assert api.kevent(5) < api.kevent(6)
    assert api.kevent(5, udata=1) > api.kevent(5, udata=0)  # fields compare in order, udata last
    assert api.kevent(5) != 5
    with pytest.raises(TypeError):
        api.kevent(5) < 5
    with pytest.raises(TypeError):
        hash(api.kevent(5))


def test_kevent_rejects_bad_idents(api):
    with pytest.raises(OverflowError):
        api.kevent(-1)
    with pytest.raises(TypeError):
        api.kevent("3")


@needs_epoll
def test_emulated_kevent_checks_field_ranges():
    with pytest.raises(OverflowError):
        emulation.kevent(3, filter=2**15)
    with pytest.raises(OverflowError):
        emulation.kevent(3, flags=2**16)
    with pytest.raises(TypeError):
        emulation.kevent(3, data=1.5)


def test_constants_are_those_of_sys_event_h(api):
    assert (api.KQ_FILTER_READ, api.KQ_FILTER_WRITE) == (-1, -2)
    assert (api.KQ_EV_ADD, api.KQ_EV_DELETE, api.KQ_EV_ENABLE, api.KQ_EV_DISABLE) == (1, 2, 4, 8)
    assert (api.KQ_EV_ONESHOT, api.KQ_EV_CLEAR) == (0x10, 0x20)
    assert (api.KQ_EV_EOF, api.KQ_EV_ERROR, api.KQ_EV_SYSFLAGS, api.KQ_EV_FLAG1) == (
        0x8000, 0x4000, 0xF000, 0x2000)


# -- readiness ------------------------------------------------------------

def test_read_readiness_and_data_is_bytes_readable(api, kq, pair):
    a, b = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    assert kq.control(None, 4, 0) == []
    b.send(b"hello")
    [e] = kq.control(None, 4, 1)
    assert (e.ident, e.filter) == (a.fileno(), api.KQ_FILTER_READ)
    assert e.data == 5
    assert not e.flags & (api.KQ_EV_EOF | api.KQ_EV_ERROR)
    # Level-triggered: reported again while the bytes are unread, and gone once read.
    assert kq.control(None, 4, 0)[0].data == 5
    assert a.recv(100) == b"hello"
    assert kq.control(None, 4, 0) == []


def test_write_readiness_reports_room(api, kq, pair):
    a, _ = pair
    [e] = kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)], 4, 0)
    assert (e.ident, e.filter) == (a.fileno(), api.KQ_FILTER_WRITE)
    assert e.data > 0


def test_write_readiness_stops_when_the_send_buffer_is_full(api, kq, pair):
    a, _ = pair
    try:
        while True:
            a.send(b"x" * 65536)
    except BlockingIOError:
        pass
    kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)], 0)
    assert kq.control(None, 4, 0) == []


def test_udata_comes_back(api, kq, pair):
    a, _ = pair
    [e] = kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD, udata=42)], 4, 0)
    assert e.udata == 42


def test_read_and_write_are_separate_registrations(api, kq, pair):
    a, b = pair
    b.send(b"x")
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD),
                ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)], 0)
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_READ), (a.fileno(), api.KQ_FILTER_WRITE)}
    kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_DELETE)], 0)
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_READ)}


def test_delete_stops_events(api, kq, pair):
    a, b = pair
    b.send(b"x")
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    assert poll(kq)
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DELETE)], 0)
    assert poll(kq) == set()


def test_disable_keeps_the_registration_and_enable_resumes_it(api, kq, pair):
    a, b = pair
    b.send(b"x")
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DISABLE)], 0)
    assert poll(kq) == set()
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ENABLE)], 0)
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_READ)}


def test_add_disabled_then_enable(api, kq, pair):
    a, _ = pair
    kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD | api.KQ_EV_DISABLE)], 0)
    assert poll(kq) == set()
    kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ENABLE)], 0)
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_WRITE)}


def test_oneshot_fires_once_then_is_deleted(api, kq, pair):
    a, b = pair
    b.send(b"x")
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD | api.KQ_EV_ONESHOT)], 0)
    [e] = kq.control(None, 4, 0)
    assert e.flags & api.KQ_EV_ONESHOT
    b.send(b"y")
    assert poll(kq) == set()
    with pytest.raises(FileNotFoundError):  # gone, not merely disabled
        kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DELETE)], 0)


def test_oneshot_is_per_filter(api, kq, pair):
    a, _ = pair
    kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD | api.KQ_EV_ONESHOT),
                ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_WRITE)}
    assert poll(kq) == set()
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DELETE)], 0)  # READ still registered


def test_clear_fires_once_per_new_data(api, kq, pair):
    a, b = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD | api.KQ_EV_CLEAR)], 0)
    b.send(b"abc")
    [e] = kq.control(None, 4, 1)
    assert e.data == 3 and e.flags & api.KQ_EV_CLEAR
    assert kq.control(None, 4, 0) == []  # the bytes are still there, but nothing new came
    b.send(b"de")
    [e] = kq.control(None, 4, 1)
    assert e.data == 5  # all the bytes readable, old and new
    assert kq.control(None, 4, 0) == []


def test_adding_again_rechecks_a_clear_registration(api, kq, pair):
    a, b = pair
    add = ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD | api.KQ_EV_CLEAR, udata=1)
    kq.control([add], 0)
    b.send(b"abc")
    assert len(kq.control(None, 4, 1)) == 1
    assert kq.control(None, 4, 0) == []
    # EV_ADD of an existing registration runs its filter again, and updates udata.
    [e] = kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD | api.KQ_EV_CLEAR, udata=2)], 4, 0)
    assert e.data == 3 and e.udata == 2


def test_clear_on_one_filter_level_on_the_other(api, kq, pair):
    """Per-filter modes on one socket: reading edge-triggered, writing level-triggered."""
    a, b = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD | api.KQ_EV_CLEAR),
                ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)], 0)
    write = (a.fileno(), api.KQ_FILTER_WRITE)
    read = (a.fileno(), api.KQ_FILTER_READ)
    assert poll(kq) == {write}
    b.send(b"x")
    assert poll(kq) == {read, write}
    for _ in range(3):
        assert poll(kq) == {write}  # writable every time; the unread byte is old news
    b.send(b"y")
    assert poll(kq) == {read, write}


def test_level_read_with_clear_write(api, kq, pair):
    a, b = pair
    b.send(b"x")
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD),
                ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD | api.KQ_EV_CLEAR)], 0)
    read = (a.fileno(), api.KQ_FILTER_READ)
    assert poll(kq) == {read, (a.fileno(), api.KQ_FILTER_WRITE)}
    for _ in range(3):
        assert poll(kq) == {read}


def test_eof_flag_when_the_peer_closes(api, kq, pair):
    a, b = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    b.send(b"last")
    b.close()
    [e] = kq.control(None, 4, 1)
    assert e.flags & api.KQ_EV_EOF
    assert e.data == 4  # the bytes sent before the close are still there to read
    assert a.recv(10) == b"last" and a.recv(10) == b""


def test_eof_flag_on_tcp_half_close(api, kq):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        with client, server:
            kq.control([ev(api, server, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
            assert kq.control(None, 4, 0) == []
            client.shutdown(socket.SHUT_WR)
            [e] = kq.control(None, 4, 1)
            assert e.flags & api.KQ_EV_EOF and e.data == 0


def test_listening_socket_data_is_connections_waiting(api, kq):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        kq.control([ev(api, listener, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
        assert kq.control(None, 4, 0) == []
        clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
        try:
            deadline = time.monotonic() + 5
            while True:
                events = kq.control(None, 4, 1)
                if events and events[0].data == 3 or time.monotonic() > deadline:
                    break
            assert events[0].data == 3
        finally:
            for c in clients:
                c.close()


def test_pipe_read_and_write(api, kq):
    r, w = os.pipe()
    try:
        kq.control([api.kevent(r, api.KQ_FILTER_READ), api.kevent(w, api.KQ_FILTER_WRITE)], 0)
        [e] = kq.control(None, 4, 0)
        assert (e.ident, e.filter) == (w, api.KQ_FILTER_WRITE) and e.data > 0
        os.write(w, b"12345")
        events = {e.ident: e for e in kq.control(None, 4, 0)}
        assert events[r].data == 5
        os.close(w)
        w = -1
        [e] = kq.control(None, 4, 0)
        assert e.ident == r and e.flags & api.KQ_EV_EOF
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


@needs_epoll
def test_emulated_write_data_on_a_pipe_is_the_room_left():
    import fcntl
    kq = emulation.kqueue()
    r, w = os.pipe()
    try:
        size = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        os.write(w, b"x" * 1000)
        [e] = kq.control([emulation.kevent(w, emulation.KQ_FILTER_WRITE)], 4, 0)
        assert e.data == size - 1000
    finally:
        os.close(r)
        os.close(w)
        kq.close()


# -- errors and arguments -------------------------------------------------

def test_deleting_an_unknown_registration_is_enoent(api, kq, pair):
    a, _ = pair
    with pytest.raises(FileNotFoundError):
        kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DELETE)], 0)
    for flags in (api.KQ_EV_ENABLE, api.KQ_EV_DISABLE):
        with pytest.raises(OSError) as info:
            kq.control([ev(api, a, api.KQ_FILTER_READ, flags)], 0)
        assert info.value.errno == errno.ENOENT


def test_a_failed_change_is_an_error_event_when_there_is_room(api, kq, pair):
    a, _ = pair
    changes = [ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DELETE, udata=7),
               ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)]
    [e] = kq.control(changes, 4, 5)  # returns at once: errors are reported without waiting
    assert e.flags & api.KQ_EV_ERROR and e.data == errno.ENOENT
    assert (e.ident, e.filter, e.udata) == (a.fileno(), api.KQ_FILTER_READ, 7)
    # The change after the failed one was still made.
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_WRITE)}


def test_changes_before_a_raised_error_are_applied(api, kq, pair):
    a, _ = pair
    with pytest.raises(FileNotFoundError):
        kq.control([ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD),
                    ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_DELETE)], 0)
    assert poll(kq) == {(a.fileno(), api.KQ_FILTER_WRITE)}


def test_a_closed_descriptor_is_ebadf(api, kq):
    s = socket.socket()
    fd = s.fileno()
    s.close()
    with pytest.raises(OSError) as info:
        kq.control([api.kevent(fd, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    assert info.value.errno == errno.EBADF
    [e] = kq.control([api.kevent(fd, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 1)
    assert e.flags & api.KQ_EV_ERROR and e.data == errno.EBADF


def test_closing_a_descriptor_removes_its_registrations(api, kq, pair):
    a, _ = pair
    number = a.fileno()
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD),
                ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)], 0)
    c, d = socket.socketpair()
    with c, d:
        a.close()
        os.dup2(c.fileno(), number)  # the same number, another socket
        try:
            assert poll(kq) == set()
            kq.control([api.kevent(number, api.KQ_FILTER_READ)], 0)
            assert poll(kq) == set()  # no write interest inherited from the old socket
            with pytest.raises(FileNotFoundError):
                kq.control([api.kevent(number, api.KQ_FILTER_WRITE, api.KQ_EV_DELETE)], 0)
            d.send(b"x")
            assert poll(kq) == {(number, api.KQ_FILTER_READ)}
        finally:
            os.close(number)


def test_argument_errors(api, kq, pair):
    a, _ = pair
    with pytest.raises(ValueError):
        kq.control(None, -1)
    with pytest.raises(ValueError):
        kq.control(None, 1, -1)
    with pytest.raises(TypeError):
        kq.control(5, 1, 0)
    with pytest.raises(TypeError):
        kq.control([a.fileno()], 1, 0)


@needs_epoll
def test_emulation_refuses_filters_it_does_not_emulate(pair):
    kq = emulation.kqueue()
    try:
        with pytest.raises(NotImplementedError):
            kq.control([emulation.kevent(pair[0], -7)], 0)  # EVFILT_TIMER
        with pytest.raises(NotImplementedError):
            emulation.kqueue.fromfd(kq.fileno())
    finally:
        kq.close()


# -- waiting --------------------------------------------------------------

def test_timeout_zero_returns_at_once(kq):
    start = time.monotonic()
    assert kq.control(None, 4, 0) == []
    assert time.monotonic() - start < 0.5


def test_timeout_waits_that_long(api, kq, pair):
    a, _ = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    start = time.monotonic()
    assert kq.control(None, 4, 0.1) == []
    assert 0.09 <= time.monotonic() - start < 2


def test_changes_with_maxevents_zero_do_not_wait(api, kq, pair):
    a, _ = pair
    start = time.monotonic()
    assert kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0, 5) == []
    assert time.monotonic() - start < 1


def test_a_blocking_wait_returns_when_data_arrives(api, kq, pair):
    a, b = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    sender = socket.socket(fileno=os.dup(b.fileno()))
    import threading
    timer = threading.Timer(0.05, sender.send, (b"x",))
    timer.start()
    try:
        [e] = kq.control(None, 4, None)
        assert e.ident == a.fileno()
    finally:
        timer.join()
        sender.close()


def test_maxevents_bounds_the_result(api, kq):
    pairs = [socket.socketpair() for _ in range(4)]
    try:
        kq.control([api.kevent(x, api.KQ_FILTER_WRITE) for x, _ in pairs], 0)
        seen = set()
        for _ in range(4):
            events = kq.control(None, 2, 0)
            assert len(events) == 2
            seen |= {e.ident for e in events}
        assert seen == {x.fileno() for x, _ in pairs}  # level events take turns
    finally:
        for x, y in pairs:
            x.close()
            y.close()


def test_maxevents_bounds_both_filters_together(api, kq, pair):
    a, b = pair
    b.send(b"x")
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD),
                ev(api, a, api.KQ_FILTER_WRITE, api.KQ_EV_ADD)], 0)
    assert len(kq.control(None, 1, 0)) == 1
    assert {poll(kq, 1).pop() for _ in range(4)} == {(a.fileno(), api.KQ_FILTER_READ),
                                                     (a.fileno(), api.KQ_FILTER_WRITE)}


def test_the_queue_itself_is_pollable(api, kq, pair):
    a, b = pair
    kq.control([ev(api, a, api.KQ_FILTER_READ, api.KQ_EV_ADD)], 0)
    assert select.select([kq.fileno()], [], [], 0)[0] == []
    b.send(b"x")
    assert select.select([kq.fileno()], [], [], 1)[0] == [kq.fileno()]


def test_closed_queue(api):
    kq = api.kqueue()
    assert not kq.closed and kq.fileno() >= 0
    kq.close()
    assert kq.closed
    kq.close()  # twice is fine
    with pytest.raises(ValueError):
        kq.control(None, 1, 0)
    with pytest.raises(ValueError):
        kq.fileno()


def test_queue_descriptor_is_not_inherited(api, kq):
    assert not os.get_inheritable(kq.fileno())


def test_kqueue_api_picks_the_platform():
    module, description = emulation.kqueue_api()
    if hasattr(select, "kqueue"):
        assert (module, description) == (select, "native kqueue")
    else:
        assert (module, description) == (emulation, "kqueue emulated on epoll")


# -- a model of the registrations -----------------------------------------

ACTIONS = ("add", "add-disabled", "add-oneshot", "delete", "enable", "disable")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(["read", "write"]),
                          st.sampled_from(ACTIONS)), max_size=25))
@pytest.mark.parametrize("api", APIS)
def test_registrations_follow_a_simple_model(api, steps):
    """Random ADD/DELETE/ENABLE/DISABLE/ONESHOT sequences, checked against a dict.

    Socket 0 has a byte to read; both are writable.  After each change the
    events reported must be exactly the enabled registrations whose
    condition holds; a change to a missing registration must fail with
    ENOENT; a oneshot registration disappears once reported.
    """
    filters = {"read": api.KQ_FILTER_READ, "write": api.KQ_FILTER_WRITE}
    flags = {"add": api.KQ_EV_ADD | api.KQ_EV_ENABLE, "add-disabled": api.KQ_EV_ADD | api.KQ_EV_DISABLE,
             "add-oneshot": api.KQ_EV_ADD | api.KQ_EV_ONESHOT, "delete": api.KQ_EV_DELETE,
             "enable": api.KQ_EV_ENABLE, "disable": api.KQ_EV_DISABLE}
    pairs = [socket.socketpair() for _ in range(2)]
    kq = api.kqueue()
    try:
        pairs[0][1].send(b"x")
        socks = [p[0] for p in pairs]
        model: dict[tuple[int, int], dict[str, bool]] = {}   # (ident, filter) -> state
        for index, name, action in steps:
            key = (socks[index].fileno(), filters[name])
            if action == "add-oneshot" and key in model:
                continue  # whether a re-add changes the mode differs between kernels
            change = api.kevent(key[0], key[1], flags[action])
            if action.startswith("add"):
                kq.control([change], 0)
                state = model.setdefault(key, {"enabled": True, "oneshot": action == "add-oneshot"})
                state["enabled"] = action != "add-disabled"
            elif key not in model:
                with pytest.raises(FileNotFoundError):
                    kq.control([change], 0)
            else:
                kq.control([change], 0)
                if action == "delete":
                    del model[key]
                else:
                    model[key]["enabled"] = action == "enable"

            ready = {k for k, s in model.items()
                     if s["enabled"] and (k[1] == api.KQ_FILTER_WRITE or k[0] == socks[0].fileno())}
            assert poll(kq) == ready
            for k in ready:
                if model[k]["oneshot"]:
                    del model[k]
    finally:
        kq.close()
        for x, y in pairs:
            x.close()
            y.close()
