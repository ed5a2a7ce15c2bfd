# tests/test_server_process.py
#
# tinyloop.testing.ServerProcess.stop() returns with all of the server's
# output read.  Its readers are threads; when the server exits, its last lines
# can still be in the pipes, and a test that looks for a closing line ("...:
# stopped (3 connections open)") read stderr_lines before the reader had taken
# it: a CI run failed so (tests/test_c_floors.py, c-uring-sqpoll), on a loaded
# machine where the reader was not scheduled in time.  Here the reader is made
# slow for certain (a subclass sleeps per line), which is that machine's state.

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time

from tinyloop.testing import READERS_TIMEOUT, ServerProcess

LINES = 200         # lines printed after SIGTERM
PER_LINE = 0.002    # seconds the slow reader takes per line: 0.4 s in all, well inside READERS_TIMEOUT

# Announces a port as every stage does, then on SIGTERM prints LINES lines to
# stderr and one to stdout, and exits.
SERVER = textwrap.dedent("""
    import signal, sys
    def stop(signum, frame):
        for i in range({lines}):
            sys.stderr.write(f"closing line {{i}}\\n")
        sys.stderr.write("stopped\\n")
        print("bye", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("tinyloop: serving fake on http://127.0.0.1:9/", flush=True)
    signal.pause()
    """)


class SlowReader(ServerProcess):
    """A ServerProcess whose stderr reader is slow: a loaded machine, for certain."""

    @staticmethod
    def _drain(stream, lines: list[str]) -> None:
        for line in stream:
            time.sleep(PER_LINE)
            lines.append(line)


def test_stop_returns_with_the_last_lines_the_server_printed() -> None:
    server = SlowReader("fake", command=[sys.executable, "-c", SERVER.format(lines=LINES)])
    with server:
        assert server.port == 9
    assert server.proc is not None and server.proc.returncode == 0
    assert len(server.stderr_lines) == LINES + 1, f"{len(server.stderr_lines)} of {LINES + 1} lines read"
    assert server.stderr_lines[-1] == "stopped\n"
    assert server.stdout_lines[-1] == "bye\n"


def test_stop_does_not_wait_for_ever_on_a_pipe_a_child_still_holds() -> None:
    # The server leaves a child of its own holding its stdout and stderr open:
    # stop() gives up on each reader after READERS_TIMEOUT instead of hanging.
    server_code = textwrap.dedent("""
        import signal, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        print("child", child.pid, flush=True)
        print("tinyloop: serving fake on http://127.0.0.1:9/", flush=True)
        signal.pause()
        """)
    server = ServerProcess("fake", command=[sys.executable, "-c", server_code])
    server.start()
    child = int(server.stdout_lines[0].split()[1])
    try:
        started = time.monotonic()
        assert server.stop() == 0
        assert time.monotonic() - started < 2 * READERS_TIMEOUT + 3.0
    finally:
        os.kill(child, signal.SIGKILL)
