# benchmarks/harness/process.py
"""A server under measurement: launched (tinyloop.testing's ServerProcess, which waits for the
announce line and stops it with SIGTERM), warmed up until it answers, pinned apart from the load
generator (taskset, and chrt where allowed), and its CPU time read from the kernel's own accounting.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks.harness.layout import usable_cpus
from tinyloop.http import HELLO
from tinyloop.testing import ServerProcess, recv_response

__all__ = ["CPU_SOURCE", "choose_names", "choose_pinning", "cpu_seconds", "launch", "minor_faults", "pid_cpu_seconds", "raise_nofile",
           "realtime_prefix", "realtime_self", "warm_up"]


def choose_names(argument: str | None, known: list[str], what: str, default: list[str]) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``, checked against ``known``; None -> ``default``;
    ``"none"`` -> ``[]``; ``"all"`` -> ``known``.  An unknown name exits (SystemExit)
    with a message that lists the choices, prefixed with the script's name."""
    program = os.path.basename(sys.argv[0]) or "benchmarks"
    if argument is None:
        return default
    if argument.strip().lower() in ("", "none"):
        return []
    if argument.strip().lower() == "all":
        return known
    chosen = [name.strip() for name in argument.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise SystemExit(f"{program}: unknown {what} {', '.join(map(repr, unknown))}; "
                         f"choose from: {', '.join(known)} (or 'all', 'none')")
    return chosen


def choose_pinning(disabled: bool, realtime: bool = False) -> dict[str, object]:
    """Pin the server to one CPU and the load generator (and this process) to another, when we can;
    with ``realtime``, both at real-time priority where allowed (:func:`realtime_prefix`).  Returns
    the JSON's ``pinning`` entry, with ``server_prefix``/``load_prefix`` to put before each command."""
    cpus = usable_cpus()
    rt, rt_note = realtime_prefix() if realtime and not disabled else ([], "not asked for")
    off = {"enabled": False, "server_prefix": rt, "load_prefix": rt, "realtime": rt_note}
    if disabled:
        return {**off, "reason": "--no-pin"}
    if len(cpus) < 2:
        return {**off, "reason": f"{len(cpus)} usable CPU: nothing to separate"}
    if shutil.which("taskset") is None:
        print("note: taskset (util-linux) is not installed: server and load generator run unpinned")
        return {**off, "reason": "taskset is not installed"}
    server_cpu, load_cpu = cpus[0], cpus[1]
    os.sched_setaffinity(0, {load_cpu})
    return {"enabled": True, "tool": "taskset", "server_cpus": str(server_cpu), "load_cpus": str(load_cpu),
            "harness_cpus": str(load_cpu), "reason": None, "realtime": rt_note,
            "server_prefix": [*rt, "taskset", "-c", str(server_cpu)],
            "load_prefix": [*rt, "taskset", "-c", str(load_cpu)]}


def realtime_prefix() -> tuple[list[str], str]:
    """``(prefix, note)``: ``chrt -f 1`` (SCHED_FIFO, sched(7)) if this process may use it, else ``[]``
    and why not (benchmarks/README.md says why a server runs so; the kernel's real-time throttling,
    sched_rt_runtime_us, still leaves other work a slice)."""
    if shutil.which("chrt") is None:
        return [], "chrt (util-linux) is not installed"
    try:
        done = subprocess.run(["chrt", "-f", "1", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return [], f"chrt did not run: {error}"
    if done.returncode != 0:
        return [], "not allowed here (needs root, CAP_SYS_NICE or RLIMIT_RTPRIO): " + done.stderr.strip()[:120]
    return ["chrt", "-f", "1"], "chrt -f 1: SCHED_FIFO, the lowest real-time priority"


def launch(name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
           prefix: Sequence[str] = (), timeout: float = 15.0) -> ServerProcess:
    """Start ``argv`` (with ``prefix``, e.g. ``taskset -c 0``, before it) and return the
    running ServerProcess once it announced its port; raises ``RuntimeError`` if it does not."""
    return ServerProcess(name, command=[*prefix, *argv], env=env or {}, timeout=timeout).start()


def cpu_seconds(process: ServerProcess) -> float | None:
    """The server's user + system CPU time so far, all its threads, in seconds; None if unknown."""
    seconds = pid_cpu_seconds(process.pid)
    if seconds is not None:
        return seconds
    try:
        return process.cpu_seconds()  # /proc/PID/stat's 10 ms ticks
    except (OSError, ValueError, IndexError):
        return None


def minor_faults(process: ServerProcess) -> int | None:
    """The server's minor page faults so far (proc(5)'s minflt); None where /proc does not say."""
    try:
        return process.minor_faults()
    except (OSError, ValueError, IndexError):
        return None


def pid_cpu_seconds(pid: int) -> float | None:
    """Process ``pid``'s user + system CPU time, all its threads, in seconds to the nanosecond;
    None if the kernel does not give it (not Linux, no such process)."""
    # Linux gives every process a CPU-time clock others may read: clock_getcpuclockid(3)'s id is
    # (~pid << 3) | 2 (CPUCLOCK_SCHED, process-wide; the kernel's posix-cpu-timers.c).
    try:
        return time.clock_gettime((~pid << 3) | 2) if sys.platform == "linux" else None
    except (OSError, OverflowError):
        return None


CPU_SOURCE = ("the process's CPU-time clock, clock_gettime((~pid << 3) | 2)"
              if sys.platform == "linux" else "/proc/PID/stat utime + stime, or none")


WARM_UP_LIMIT = 60.0  # seconds a whole warm-up may take: a peer that answers, but slowly, is a failed run


def warm_up(address: tuple[str, int], requests: int, timeout: float, *, path: str = "/",
            body: bytes | None = HELLO, limit: float = WARM_UP_LIMIT) -> tuple[str, str] | None:
    """Send ``GET path`` ``requests`` times on one keep-alive connection: the first answer says the
    server is up, the rest let it settle.  Returns None when every answer was 200 with ``body``
    (None: any body), else ``(status, note)`` for the run's record; each answer waits ``timeout``
    seconds at most, and all of them ``limit`` seconds (a peer that stalls on each answer, but
    less than ``timeout``, would otherwise hold a sitting for hours)."""
    done = 0
    ends = time.monotonic() + limit
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            buffer = bytearray()
            for done in range(max(requests, 1)):
                if done and time.monotonic() > ends:
                    return "timeout", (f"the warm-up took over {limit:g} s: {done} of "
                                       f"{requests} answers (GET {path})")
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: warm-up\r\n\r\n".encode())
                status, _, got = recv_response(sock, buffer)
                if status != 200 or body not in (None, got):
                    return "error", f"GET {path} answered {status} {got[:40]!r}"
    except (socket.timeout, TimeoutError):
        where = f" (warm-up request {done + 1})" if done else ""
        return "timeout", f"no answer to GET {path} within {timeout:g} s{where}"
    except (OSError, ValueError, IndexError) as error:
        return "error", f"GET {path} failed: {error}"
    return None


def realtime_self(cpu: int | None = None) -> str:
    """Pin this process (and the workers it starts, which inherit it) to ``cpu`` (default its first
    usable CPU), at the lowest real-time priority where allowed (sched(7)); returns the JSON's note."""
    if not hasattr(os, "sched_setaffinity"):
        return "unpinned: no sched_setaffinity here"
    cpu = usable_cpus()[0] if cpu is None else cpu
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError as error:
        return f"on CPU {cpu}; not at real-time priority ({error})"
    return f"on CPU {cpu}, SCHED_FIFO priority 1"


def raise_nofile(need: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE (servers started from here inherit it) toward ``need``,
    up to the hard limit (``ulimit -Hn`` raises that); returns the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft
