"""A server's system calls, counted by strace(1) attached to it for a block.

    with Strace(pid, ["-c"], out):     strace -f -p PID -c -o OUT while the block runs
    parse_strace_summary(text)         strace -c's table -> {name: calls}
    strace_problem()                   None if strace can attach here, else why not

strace stops the traced process at every system call (ptrace(2)), so a
traced server is several times slower: use it to count calls, never to time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.experiment import interrupt

__all__ = ["Strace", "parse_strace_summary", "strace_problem"]


class Strace:
    """``strace -f -qq -p PID ARGS -o OUT`` around a block: attached on entry, detached on exit.

    ``args`` are strace's own options (``["-c"]`` for the summary table,
    ``["-e", "trace=sendto"]`` to log some calls); ``out`` (a Path) receives
    what strace writes.  Entering returns once every thread of the process
    has strace as its ``TracerPid`` (/proc/PID/task/TID/status), so nothing
    the block makes the server do goes uncounted; it raises ``RuntimeError``
    with strace's complaint if strace exits or has not attached within
    ``attach_timeout`` seconds.  Leaving sends SIGINT (strace detaches and
    writes its summary) and waits, SIGKILL after 10 s.
    """

    def __init__(self, pid: int, args: list[str], out: Path, attach_timeout: float = 10.0) -> None:
        self.pid, self.args, self.out, self.attach_timeout = pid, args, out, attach_timeout
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Strace:
        self.proc = subprocess.Popen(["strace", "-f", "-qq", "-p", str(self.pid), *self.args, "-o", str(self.out)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        deadline = time.monotonic() + self.attach_timeout
        while not self._attached():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                complaint = self._stop() or "strace did not attach in time"
                raise RuntimeError(f"strace -p {self.pid}: {complaint}")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _attached(self) -> bool:
        try:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                with open(f"/proc/{self.pid}/task/{tid}/status") as f:
                    if next((line.split()[1] for line in f if line.startswith("TracerPid:")), "0") == "0":
                        return False
        except OSError:
            return False  # the process (or a thread) went away: not attached
        return True

    def _stop(self) -> str:
        """Detach and wait; returns the last line strace complained with ('' if none)."""
        proc, self.proc = self.proc, None
        lines = (interrupt(proc, grace=10) if proc else "").strip().splitlines()
        return lines[-1].strip() if lines else ""


def strace_problem() -> str | None:
    """None if ``strace -p`` can attach here, else why not (for a skip note): tried on a child of our
    own, so a missing strace and a forbidden ptrace (no CAP_SYS_PTRACE, Yama's ptrace_scope) both show."""
    if shutil.which("strace") is None:
        return "strace is not installed (Debian: apt-get install strace)"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdin=subprocess.DEVNULL)
    try:
        with Strace(child.pid, ["-c"], Path(os.devnull), attach_timeout=5):
            pass
    except RuntimeError as error:
        return str(error)
    finally:
        child.kill()
        child.wait()
    return None


# "% time     seconds  usecs/call     calls    errors syscall" then rows like
# " 41.20    0.012345          12      1000        17 recvfrom" (errors may be blank).
_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def parse_strace_summary(text: str) -> dict[str, int]:
    """strace ``-c``'s table (text) -> ``{system call name: calls}``, without the ``total`` row."""
    counts: dict[str, int] = {}
    for calls, name in (match.groups() for match in map(_ROW.match, text.splitlines()) if match):
        if name != "total":
            counts[name] = counts.get(name, 0) + int(calls)
    return counts
