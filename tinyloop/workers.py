"""``python -m tinyloop serve STAGE --workers N``: one stage's server in N
processes, each with a listening socket of its own on the same port, and a
parent that keeps N of them running.

    holder = reserve(host, port)        # parent: bind, never listen, keep the port
    for each worker: fork()             # before any loop exists
        child: socket(); setsockopt(SO_REUSEPORT); bind(); listen(); serve()
    parent: wait for signals; restart a worker that dies; on SIGTERM or
            SIGINT, send SIGTERM to every worker, wait for them, exit 0

SO_REUSEPORT (socket(7), Linux 3.9+) lets several sockets bind the same
address and port when every one of them sets it (and, on Linux, they
belong to the same user).  For TCP the kernel keeps the listening ones in a
group and picks one socket per incoming connection by a hash of the
connection's addresses and ports: the workers share out the connections
without ever sharing a socket or waking each other.

Rules this file keeps:
  * Standard library only, and Unix only: fork(2), waitpid(2), kill(2).
    Where SO_REUSEPORT or fork is missing, reuse_port_missing() says why
    and the command line exits 2 before starting anything.
  * The parent runs no event loop and serves nothing.  It forks every
    worker itself, so no worker inherits a loop, a selector or a thread.
  * The parent never spins.  It sleeps in select(2) until a signal (a
    byte on the wake-up pipe), a worker's "listening" line, or the next
    planned restart; a worker that keeps dying at start is restarted with
    a growing back-off, and every restart is a log line that says so.
  * Nothing is left behind: on stop every worker is waited for (reaped);
    one that has not stopped after STOP_TIMEOUT seconds gets SIGKILL.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from tinyloop.serving import BACKLOG, announce, log, stop_on_sigterm

__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "STABLE_AFTER", "STOP_TIMEOUT", "listen_reuseport",
           "reserve", "reuse_port_missing", "supervise"]

# A worker that dies within STABLE_AFTER seconds of its start is restarted
# after a delay that starts at BACKOFF_FIRST and doubles each time it happens
# again in a row, up to BACKOFF_MAX; one that lived longer is restarted at once.
BACKOFF_FIRST = 0.1   # seconds
BACKOFF_MAX = 5.0     # seconds
STABLE_AFTER = 1.0    # seconds
# How long the parent waits for its workers after forwarding a stop, in seconds.
STOP_TIMEOUT = 10.0

# The signals the parent handles.  SIGCHLD only wakes it up (a worker exited).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_HANDLED = (*_STOP_SIGNALS, signal.SIGCHLD)


def reuse_port_missing() -> str | None:
    """None if this system can run workers, else a sentence saying what is missing.

    Needs ``socket.SO_REUSEPORT`` (Linux 3.9+, the BSDs, macOS; not Windows),
    accepted by the kernel on a TCP socket (an older Linux answers
    ``ENOPROTOOPT``), and ``os.fork``.
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        return f"SO_REUSEPORT does not exist on this platform ({sys.platform}): it needs Linux, a BSD or macOS"
    if not hasattr(os, "fork"):
        return f"os.fork does not exist on this platform ({sys.platform})"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError as error:
        return f"the kernel refuses SO_REUSEPORT on a TCP socket ({error.strerror})"
    return None


def _reuseport_socket(host: str, port: int) -> socket.socket:
    """A TCP socket with SO_REUSEADDR and SO_REUSEPORT set, bound to ``(host, port)``; not listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # FreeBSD 12+ spreads connections only across sockets that set
        # SO_REUSEPORT_LB; Python names it where the platform has it.
        if hasattr(socket, "SO_REUSEPORT_LB"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT_LB, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def reserve(host: str, port: int) -> socket.socket:
    """Bind (never listen) a SO_REUSEPORT socket to ``(host, port)``, to hold the port for the workers.

    ``port=0`` lets the kernel pick a free port; ``getsockname()`` then names
    it, and every worker binds that one.  Raises ``OSError`` (EADDRINUSE when
    a socket without SO_REUSEPORT, or another user's, holds the port).

    Discussion: why the parent binds but does not listen.  The kernel's
    SO_REUSEPORT group, the set of sockets it shares connections among, is
    made of *listening* TCP sockets.  A parent that listened would be dealt
    its share of connections and never accept them: their clients would
    wait forever.  A socket that is only bound takes no connections, yet it
    keeps the port ours: when every worker has died and is being restarted,
    no other program can take the port in between.
    """
    return _reuseport_socket(host, port)


def listen_reuseport(host: str, port: int, *, backlog: int = BACKLOG) -> socket.socket:
    """A worker's own listening socket on ``(host, port)``, in the port's SO_REUSEPORT group.

    The socket is blocking, as tinyloop.serving.listen leaves it: each stage
    sets its own mode.  Raises ``OSError`` as bind(2) and listen(2) do.
    """
    sock = _reuseport_socket(host, port)
    try:
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _Worker:
    """One slot of the pool: ``pid`` is None while the slot waits for its (re)start at ``start_at``."""

    index: int                 # 1..N, for the log
    pid: int | None = None
    started: float = 0.0       # time.monotonic() of the last fork
    listening: bool = False    # has said so on the ready pipe
    quick_deaths: int = 0      # deaths within STABLE_AFTER of starting, in a row
    start_at: float = 0.0      # time.monotonic() when the next start is due


def _backoff(quick_deaths: int) -> float:
    """Seconds to wait before restarting a worker that died young ``quick_deaths`` times in a row."""
    if quick_deaths == 0:
        return 0.0
    return min(BACKOFF_FIRST * 2 ** (quick_deaths - 1), BACKOFF_MAX)


def supervise(name: str, serve: Callable[[socket.socket], None], host: str, port: int,
              workers: int) -> int:
    """Run ``serve(listener)`` in ``workers`` processes sharing ``(host, port)``; return an exit code.

    ``serve`` is a stage's ``serve``: it takes a bound, listening socket and
    serves until KeyboardInterrupt (SIGTERM becomes one, see
    tinyloop.serving.stop_on_sigterm).  ``port=0`` picks a free port.  The
    announce line is printed once, when every worker listens.  Returns 0
    after SIGTERM or SIGINT once every worker has stopped, 1 if the port
    cannot be bound or a worker had to be killed.  Raises ``ValueError`` if
    ``workers < 1``.  Sources: socket(7) (SO_REUSEPORT), fork(2),
    waitpid(2), the signal module's set_wakeup_fd.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    try:
        holder = reserve(host, port)
    except OSError as error:
        print(f"tinyloop: cannot listen on {host}:{port}: {error.strerror}", file=sys.stderr)
        return 1
    port = holder.getsockname()[1]
    wake_r, wake_w = os.pipe()    # signal numbers, written by the C-level signal handler
    ready_r, ready_w = os.pipe()  # "PID\n" from each worker once it listens
    for fd in (wake_r, wake_w, ready_r):  # set_wakeup_fd needs wake_w non-blocking
        os.set_blocking(fd, False)
    old_wakeup = signal.set_wakeup_fd(wake_w)
    old_handlers = {signum: signal.signal(signum, _note) for signum in _HANDLED}
    pool = [_Worker(index) for index in range(1, workers + 1)]
    by_pid: dict[int, _Worker] = {}
    announced = False
    stopping: int | None = None   # the stop signal received, once one has been
    deadline = 0.0                # when stopping: SIGKILL whoever is left after this
    killed = False
    try:
        # This while loop is the supervisor: start what is due, sleep until
        # something happens, then read signals, ready lines, and exits.
        while True:
            now = time.monotonic()
            if stopping is None:
                for worker in pool:
                    if worker.pid is None and worker.start_at <= now:
                        _fork(worker, name, serve, host, port, holder, (wake_r, wake_w, ready_r), ready_w)
                        by_pid[worker.pid] = worker
            elif not by_pid:
                break
            elif now >= deadline:
                for pid, worker in by_pid.items():
                    log(f"{name}: worker {worker.index} (pid {pid}) has not stopped; SIGKILL")
                    os.kill(pid, signal.SIGKILL)
                killed = True
                while by_pid:  # SIGKILL cannot be ignored: these waits end
                    pid, _ = os.waitpid(-1, 0)
                    by_pid.pop(pid, None)
                break
            readable, _, _ = select.select([wake_r, ready_r], [], [], _timeout(pool, stopping, deadline))
            if wake_r in readable:
                for signum in _drain(wake_r):
                    if signum in _STOP_SIGNALS:
                        if stopping is None:
                            stopping, deadline = signum, time.monotonic() + STOP_TIMEOUT
                            log(f"{name}: {signal.Signals(signum).name}: stopping {len(by_pid)} worker(s)")
                            for pid in by_pid:
                                os.kill(pid, signal.SIGTERM)
                        else:
                            deadline = 0.0  # a second stop signal: do not wait any longer
            if ready_r in readable:
                for line in _drain(ready_r).decode("ascii").split():
                    worker = by_pid.get(int(line))
                    if worker is not None:
                        worker.listening = True
                        log(f"{name}: worker {worker.index} of {workers} listening (pid {line})")
                if not announced and all(worker.listening for worker in pool):
                    announce(name, holder)
                    announced = True
            for pid, code in _reap():
                worker = by_pid.pop(pid, None)
                if worker is not None and stopping is None:
                    _plan_restart(name, worker, pid, code)
                elif worker is not None and code != 0:
                    log(f"{name}: worker {worker.index} (pid {pid}) stopped with code {code}")
    finally:
        for pid in by_pid:  # only if this function is failing: leave no worker behind
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        signal.set_wakeup_fd(old_wakeup)
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
        for fd in (wake_r, wake_w, ready_r, ready_w):
            os.close(fd)
        holder.close()
    log(f"{name}: stopped")
    return 1 if killed else 0


def _note(signum: int, frame: object) -> None:
    """The parent's handler: nothing to do here, the wake-up pipe carries the signal number."""


def _drain(fd: int) -> bytes:
    """Everything a non-blocking (or just-readable) pipe holds now."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            break
        chunks.append(chunk)
        if len(chunk) < 4096:
            break
    return b"".join(chunks)


def _timeout(pool: list[_Worker], stopping: int | None, deadline: float) -> float | None:
    """How long select may sleep, in seconds: until the next planned start or the stop deadline."""
    if stopping is not None:
        return max(deadline - time.monotonic(), 0.0)
    due = [worker.start_at for worker in pool if worker.pid is None]
    return max(min(due) - time.monotonic(), 0.0) if due else None


def _reap() -> list[tuple[int, int]]:
    """``(pid, exit code)`` of every worker that has exited; -N for killed by signal N."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break  # no children at all
        if pid == 0:
            break  # children, none exited
        out.append((pid, os.waitstatus_to_exitcode(status)))
    return out


def _plan_restart(name: str, worker: _Worker, pid: int, code: int) -> None:
    """Put a worker that died on its own back in line, with the back-off it has earned."""
    lived = time.monotonic() - worker.started
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    worker.quick_deaths = worker.quick_deaths + 1 if lived < STABLE_AFTER else 0
    delay = _backoff(worker.quick_deaths)
    worker.pid, worker.listening = None, False
    worker.start_at = time.monotonic() + delay
    if delay:
        log(f"{name}: worker {worker.index} (pid {pid}) {how} after {lived:.1f} s; restarting it in "
            f"{delay:.1f} s (back-off: it died within {STABLE_AFTER:g} s of starting "
            f"{worker.quick_deaths} time(s) in a row)")
    else:
        log(f"{name}: worker {worker.index} (pid {pid}) {how} after {lived:.1f} s; restarting it now")


def _fork(worker: _Worker, name: str, serve: Callable[[socket.socket], None], host: str, port: int,
          holder: socket.socket, parent_fds: tuple[int, ...], ready_w: int) -> None:
    """Start one worker process for ``worker``'s slot; in the parent, record its pid.

    Discussion: os.fork rather than multiprocessing.  A worker needs nothing
    from its parent but the stage's code, already imported, and three
    numbers; it sends back one line.  fork(2) gives exactly that, and the
    reader sees the system calls the chapter is about: fork, waitpid, kill.
    multiprocessing would add a pickled process object, a sentinel pipe, a
    resource tracker and, with its "spawn" start method, a fresh interpreter
    importing everything again.  fork copies only the calling thread, so it
    is safe only before threads or an event loop exist: the parent never
    starts either, which is why supervise() runs before any stage code.

    Discussion: the signal mask around fork.  Until the child has replaced
    the parent's handlers with its own, a SIGTERM from the parent would run
    the parent's do-nothing handler in the child and be lost; the worker
    would then serve on until it was killed.  So the stop signals are
    blocked across fork; the child unblocks them once its handlers are in
    place, and a SIGTERM that came meanwhile is delivered then.
    """
    sys.stdout.flush()  # else the child inherits unwritten output and writes it twice
    sys.stderr.flush()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
    pid = os.fork()
    if pid:  # the parent
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        worker.pid, worker.started, worker.listening = pid, time.monotonic(), False
        return
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in parent_fds:
            os.close(fd)
        holder.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Ctrl-C at a terminal sends SIGINT to the whole process group, the
        # workers too; the parent turns it into one SIGTERM per worker.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_on_sigterm()
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sock = listen_reuseport(host, port)
        try:
            os.write(ready_w, b"%d\n" % os.getpid())  # shorter than PIPE_BUF: one atomic write
            os.close(ready_w)
            serve(sock)
        finally:
            sock.close()
        code = 0
    except KeyboardInterrupt:
        code = 0  # SIGTERM: the clean stop
    except BaseException:
        traceback.print_exc()
        log(f"{name}: worker {worker.index} failed")
    finally:
        # Never return into the parent's code (its loop, its finally blocks):
        # leave at once, with our own exit code.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
