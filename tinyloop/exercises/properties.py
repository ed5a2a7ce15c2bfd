"""Loop properties: what a correct server does that a test of its output
cannot see.  Each is measured from outside on a running server process
(tinyloop.testing.ServerProcess), with Linux's /proc as the instrument:

  single_thread  one thread serves many clients at once (an event loop,
                 not a thread per connection)
  idle_cpu       no CPU while nothing happens (the loop blocks in its wait,
                 it does not spin)
  no_fd_growth   every connection's descriptor is closed when the client
                 leaves, whether it said goodbye, reset, or left mid-request
  slow_client    a client that dribbles its request does not hold up others

Rules this module keeps:
  * Each property gets a fresh server, so one failure does not colour the
    next measurement.
  * Everything is bounded: every socket has a timeout, every wait a
    deadline, every count a limit (see Limits); a hung server fails a
    property, it never hangs the checker.
  * A result's message says what was measured, in numbers, and what to
    look at in the code.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tinyloop.exercises.model import PROPERTIES
from tinyloop.testing import ServerProcess, http_get, recv_response

__all__ = ["FULL", "QUICK", "Limits", "Result", "check", "crash", "last_line", "main", "send_quietly"]

_KEEP_ALIVE_GET = b"GET / HTTP/1.1\r\nHost: checker\r\n\r\n"
_ECHO_BYTES = 1 << 20  # crash(): a body larger than any socket buffer


@dataclass(frozen=True)
class Limits:
    """How hard the properties push, and how much they allow."""

    clients: int = 20            # concurrent clients (single_thread); quick GETs (slow_client)
    idle_seconds: float = 1.0    # how long idle_cpu watches an idle server
    idle_cpu: float = 0.05       # CPU seconds an idle server may use in that time
    connections: int = 1000      # sequential connections for no_fd_growth
    drip: float = 0.1            # seconds between the slow client's bytes
    slow_bound: float = 2.0      # seconds the quick GETs may take beside the slow client
    timeout: float = 5.0         # seconds any one client operation may wait
    settle: float = 1.0          # seconds a server may take to close after its clients


FULL = Limits()
# For the test suite: the same checks with smaller counts.
QUICK = Limits(idle_seconds=0.5, connections=200)


@dataclass(frozen=True)
class Result:
    name: str
    passed: bool
    message: str


def check(stage: str, names: tuple[str, ...], *, env: Mapping[str, str] | None = None,
          limits: Limits = FULL) -> list[Result]:
    """Measure each property in ``names`` on a fresh server of ``stage`` started with ``env``
    added to its environment; one :class:`Result` per name, in order.

    A server that does not start fails the property with its own output.
    """
    results = []
    for name in names:
        measure = _MEASURES[name]
        try:
            with ServerProcess(stage, env=env, timeout=limits.timeout) as server:
                try:
                    passed, message = measure(server, limits)
                except (OSError, ValueError) as error:  # timeouts, resets, garbage
                    passed, message = False, _broken(server, error, limits)
        except RuntimeError as error:  # did not start
            passed, message = False, f"the server did not start: {last_line(str(error))}"
        results.append(Result(name, passed, message))
    return results


def crash(stage: str, *, env: Mapping[str, str] | None = None,
          limits: Limits = FULL) -> str | None:
    """Serve two requests on a fresh server of ``stage`` (with ``env``) and return the
    traceback it printed on standard error, or None if it printed none.

    The checker calls this when tests fail: a test only sees a closed
    connection, while the server's own traceback says which line raised.
    """
    timeout = min(limits.timeout, 2.0)  # a diagnosis, not a test: do not wait long
    try:
        with ServerProcess(stage, env=env, timeout=limits.timeout) as server:
            try:
                with server.connect(timeout) as sock:
                    sock.sendall(_KEEP_ALIVE_GET)
                    recv_response(sock)
                http_get(server.address, timeout=timeout)
                # A large echo read slowly: the path of partial writes and
                # backpressure, where many wrong solutions only then fail.
                with server.connect(timeout) as sock:
                    body = b"x" * _ECHO_BYTES
                    request = (b"POST /echo HTTP/1.1\r\nHost: checker\r\nContent-Length: %d\r\n"
                               b"Connection: close\r\n\r\n" % len(body) + body)
                    # Send from a thread while this one reads: the server echoes
                    # before the body has all arrived, and a client that only
                    # sent would stall both sides.
                    sender = threading.Thread(target=send_quietly, args=(sock, request), daemon=True)
                    sender.start()
                    recv_response(sock)
                    sender.join(timeout)
            except (OSError, ValueError):
                pass
            time.sleep(0.1)  # let a dying server finish printing
            # Read before stopping it: what it prints on SIGTERM is not a crash.
            output = "".join(server.stderr_lines)
    except RuntimeError as error:  # it did not start
        output = str(error)
    start = output.rfind("Traceback (most recent call last)")
    return output[start:] if start >= 0 else None


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """``sock.sendall(data)``, an OSError ignored: for a sending thread whose reader
    (another thread) reports what went wrong."""
    try:
        sock.sendall(data)
    except OSError:
        pass  # the reader sees what went wrong


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (a traceback's verdict), stripped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _broken(server: ServerProcess, error: BaseException, limits: Limits) -> str:
    """Say why a measurement stopped: the server died, or stopped answering."""
    assert server.proc is not None
    time.sleep(0.1)  # a crash takes a moment to show
    if server.proc.poll() is not None:
        return (f"the server exited (code {server.proc.returncode}): "
                f"{last_line(''.join(server.stderr_lines))}")
    if isinstance(error, TimeoutError):
        return f"the server left a client waiting more than {limits.timeout:g} s for an answer"
    return f"a client's connection failed: {error}"


def single_thread(server: ServerProcess, limits: Limits) -> tuple[bool, str]:
    clients = [server.connect(limits.timeout) for _ in range(limits.clients)]
    try:
        buffers = [bytearray() for _ in clients]
        most = server.thread_count()
        for _ in range(2):  # two rounds of one request per client, all connected at once
            for sock in clients:
                sock.sendall(_KEEP_ALIVE_GET)
            most = max(most, server.thread_count())
            for i, (sock, buffer) in enumerate(zip(clients, buffers)):
                try:
                    recv_response(sock, buffer)
                except TimeoutError:
                    return False, (f"with {limits.clients} clients connected at once, client "
                                   f"{i + 1} waited more than {limits.timeout:g} s for its "
                                   "answer: serve every connected client, not one at a time")
            most = max(most, server.thread_count())
    finally:
        for sock in clients:
            sock.close()
    if most == 1:
        return True, f"1 thread served {limits.clients} clients at once"
    return False, (f"your server ran {most} threads while serving {limits.clients} clients "
                   "at once: one event loop serves them all from one thread")


def idle_cpu(server: ServerProcess, limits: Limits) -> tuple[bool, str]:
    # Keep one served client connected: a loop that asks for write readiness
    # with nothing to send spins only while a connection is registered.
    with server.connect(limits.timeout) as sock:
        sock.sendall(_KEEP_ALIVE_GET)
        recv_response(sock)
        time.sleep(0.2)  # let the server finish its answer and settle
        before = server.cpu_seconds()
        time.sleep(limits.idle_seconds)
        used = server.cpu_seconds() - before
    if used <= limits.idle_cpu:
        return True, f"{used:.2f} s of CPU while idle for {limits.idle_seconds:g} s"
    return False, (f"your server used {used:.2f} s of CPU while idle for "
                   f"{limits.idle_seconds:g} s with one idle client connected: it is "
                   "busy-waiting; block in the call that waits for readiness, and ask "
                   "for write readiness only while output is waiting")


def no_fd_growth(server: ServerProcess, limits: Limits) -> tuple[bool, str]:
    http_get(server.address, timeout=limits.timeout)  # warm up: anything allocated lazily
    time.sleep(0.1)
    before = server.fd_count()
    for i in range(limits.connections):
        _KINDS[i % len(_KINDS)](server.address, limits.timeout)
    deadline = time.monotonic() + limits.settle  # it closes its side a moment after we do
    after = server.fd_count()
    while after > before and time.monotonic() < deadline:
        time.sleep(0.05)
        after = server.fd_count()
    if after <= before:
        return True, f"{after} descriptors after {limits.connections} connections, as before"
    return False, (f"after {limits.connections} connections your server holds {after - before} "
                   f"more file descriptors than before ({before} -> {after}): close each "
                   "socket when its client leaves (end of stream, reset, a half-sent request) "
                   "and after answering a request with Connection: close")


# The four ways a client leaves, in turn.
def _leave_after_close_request(address: tuple[str, int], timeout: float) -> None:
    http_get(address, timeout=timeout)


def _leave_after_keep_alive(address: tuple[str, int], timeout: float) -> None:
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(_KEEP_ALIVE_GET)
        recv_response(sock)


def _leave_with_reset(address: tuple[str, int], timeout: float) -> None:
    with socket.create_connection(address, timeout=timeout) as sock:
        # SO_LINGER with a zero timeout: close() sends RST, not FIN (see socket(7)).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _leave_mid_request(address: tuple[str, int], timeout: float) -> None:
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHo")


_KINDS = (_leave_after_close_request, _leave_after_keep_alive, _leave_with_reset,
          _leave_mid_request)


def slow_client(server: ServerProcess, limits: Limits) -> tuple[bool, str]:
    request = b"GET / HTTP/1.1\r\nHost: a-slow-client\r\n\r\n"
    stop = threading.Event()
    sent = 0

    def drip() -> None:
        nonlocal sent
        while sent < len(request) - 1 and not stop.wait(limits.drip):
            try:
                slow.send(request[sent:sent + 1])
            except OSError:
                return  # the server hung up on it; the quick GETs still tell
            sent += 1

    slow = server.connect(limits.timeout)
    dripper = threading.Thread(target=drip, daemon=True)
    try:
        dripper.start()
        time.sleep(3 * limits.drip)  # the server has accepted it and read its first bytes
        start = time.monotonic()
        deadline = start + limits.slow_bound
        answered = 0
        try:
            for _ in range(limits.clients):
                http_get(server.address, timeout=max(0.05, deadline - time.monotonic()))
                answered += 1
        except TimeoutError:
            pass
        took = time.monotonic() - start
        stop.set()
        dripper.join()
        what = f"one client sent its request one byte every {limits.drip * 1000:g} ms"
        if answered < limits.clients or took > limits.slow_bound:
            return False, (f"while {what}, only {answered} of {limits.clients} quick GETs on "
                           f"other connections were answered within {limits.slow_bound:g} s: "
                           "your server waits for the slow client; serve whichever socket is "
                           "ready instead")
        slow.sendall(request[sent:])  # the rest at once: it must be answered too
        status, _, _ = recv_response(slow)
        if status != 200:
            return False, f"the slow client's request, once complete, got status {status}, not 200"
        return True, f"{limits.clients} quick GETs took {took:.2f} s while {what}"
    finally:
        stop.set()
        dripper.join()
        slow.close()


_MEASURES: dict[str, Callable[[ServerProcess, Limits], tuple[bool, str]]] = {
    "single_thread": single_thread,
    "idle_cpu": idle_cpu,
    "no_fd_growth": no_fd_growth,
    "slow_client": slow_client,
}
assert set(_MEASURES) == set(PROPERTIES), "model.PROPERTIES and the measures must agree"


def main(argv: list[str] | None = None) -> int:
    """``python -m tinyloop.exercises.properties STAGE [NAME...] [--quick] [--crash]
    --report-fd FD [--env JSON]``: measure the properties NAME (or, with
    ``--crash``, run :func:`crash`) and write the result as one JSON document
    on descriptor FD: ``{"results": [[name, passed, message], ...]}`` or
    ``{"crash": traceback or null}``.  The servers get ``--env``'s variables.

    The checker runs this inside a sandbox, beside the servers it measures
    (its loopback is theirs).  The process makes itself non-dumpable first
    (prctl(2) PR_SET_DUMPABLE): a server, running the student's code as the
    same user, can then neither ptrace it nor open its descriptor through
    /proc/PID/fd, and so cannot write its results.  Returns 0."""
    import argparse
    import json
    import os
    parser = argparse.ArgumentParser(prog="python -m tinyloop.exercises.properties")
    parser.add_argument("stage")
    parser.add_argument("names", nargs="*", help=f"of {', '.join(PROPERTIES)}")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--env", default="{}")
    args = parser.parse_args(argv)
    if set(args.names) - set(PROPERTIES):
        parser.error(f"unknown properties: {sorted(set(args.names) - set(PROPERTIES))}")
    from tinyloop.exercises.outcomes import undumpable
    undumpable()
    env, limits = json.loads(args.env), QUICK if args.quick else FULL
    if args.crash:
        found: dict = {"crash": crash(args.stage, env=env, limits=limits)}
    else:
        found = {"results": [[r.name, r.passed, r.message]
                             for r in check(args.stage, tuple(args.names), env=env, limits=limits)]}
    with os.fdopen(args.report_fd, "w") as out:
        json.dump(found, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
