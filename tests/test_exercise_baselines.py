# tests/test_exercise_baselines.py
#
# The baselines chapter's exercise (thread-per-connection), each behaviour
# said in the exercise's words; the checker runs these first (tests named
# test_<exercise>_...).  The server runs in a thread of this process on
# 127.0.0.1, so a test can make thread creation fail on purpose; it stops
# when the test closes its listener.

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

import tinyloop.baseline.threaded as threaded
from tinyloop.testing import http_get


_REAL_THREAD = threading.Thread


class RefusingThread(threading.Thread):
    """A Thread whose start() fails like the OS out of threads, for the server's clients only."""

    def start(self) -> None:
        if self.name.startswith("client-") or getattr(self, "_target", None) is threaded._serve_and_close:
            raise RuntimeError("can't start new thread")
        super().start()


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    listener = socket.create_server(("127.0.0.1", 0))
    runner = threading.Thread(target=_serve_until_closed, args=(listener,), daemon=True)
    runner.start()
    try:
        yield listener.getsockname()
    finally:
        # shutdown() wakes the accept() blocked in the server's thread, which
        # then raises: serve() ends with it.
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
        runner.join(2)


def _serve_until_closed(listener: socket.socket) -> None:
    try:
        threaded.serve(listener)
    except OSError:
        pass  # the test closed the listener


def test_thread_per_connection_each_client_is_served(server: tuple[str, int]) -> None:
    status, body = http_get(server, timeout=5)
    assert status == 200, f"the server must answer GET / with 200; it answered {status}"


def test_thread_per_connection_a_slow_client_does_not_hold_up_the_next(server: tuple[str, int]) -> None:
    slow = socket.create_connection(server, timeout=5)
    try:
        slow.sendall(b"GET / HTTP/1.1\r\n")  # and never the rest
        started = time.monotonic()
        status, _ = http_get(server, timeout=5)
        took = time.monotonic() - started
        assert status == 200 and took < 2, (
            "each accepted connection must be handed to a new thread, and accept() called again at "
            f"once, so a slow client holds up nobody; a second client waited {took:.1f} s")
    finally:
        slow.close()


def test_thread_per_connection_threads_are_daemons(server: tuple[str, int],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[threading.Thread] = []

    class Recording(threading.Thread):
        def start(self) -> None:
            made.append(self)
            super().start()

    monkeypatch.setattr(threaded.threading, "Thread", Recording)
    http_get(server, timeout=5)
    assert made, "each connection must get a new threading.Thread"
    assert all(t.daemon for t in made), (
        "the connection threads must be daemon threads (daemon=True), so that Ctrl-C stops the "
        "server without waiting for its clients")


def test_thread_per_connection_a_thread_that_cannot_start_closes_the_socket(
        server: tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[str] = []
    monkeypatch.setattr(threaded, "log", lambda message, *args, **kwargs: logged.append(str(message)))
    monkeypatch.setattr(threaded.threading, "Thread", RefusingThread)
    with socket.create_connection(server, timeout=3) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        try:
            data = client.recv(100)
        except (ConnectionResetError, TimeoutError) as error:
            data = error
    # Closed with our request unread, the kernel may answer with a reset: closed either way.
    assert data == b"" or isinstance(data, ConnectionResetError), (
        "if the thread cannot be started (RuntimeError), the server must close the socket: the "
        f"client must see the connection closed; it got {data!r}")
    assert logged, "and log it (tinyloop.serving.log): nothing was logged"
    monkeypatch.setattr(threaded.threading, "Thread", _REAL_THREAD)
    status, _ = http_get(server, timeout=5)
    assert status == 200, (
        "after a thread failed to start, the server must go on serving (catch the RuntimeError); "
        f"the next client got {status}")
