# tests/conformance/children.py
#
# Child programs for the tests whose failure is a hang, a spin or a process
# that never exits (timers at infinity, fork, exit): the test runs a short
# program in a fresh interpreter on the row's loop, with a timeout, so a
# failure is a failed test and never a stuck pytest.
#
# Rules this file keeps:
#   * The child makes the same loop as the row (conftest.loop_spec) and
#     imports nothing of the test's: its program is a string, read whole in
#     the test that runs it, after WORK (below) where it needs it.
#   * A child that outlives its timeout is killed with its process group
#     (it may have forked), and the test fails saying so.

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from conformance.conftest import loop_spec

# Prepended to every child program: ``make_loop`` is the row's factory.
PRELUDE = """\
import asyncio, importlib, sys
_module, _, _factory = {spec!r}.partition(":")
make_loop = getattr(importlib.import_module(_module), _factory)
"""


# A child program's common part, for the fork tests on every loop
# (test_fork_exit.py) and for tinyloop.uv's own (tests/test_uv_fork.py):
# ``work()``, a little of everything a loop does (a timer, a socket read
# woken by another thread, run_in_executor, a wake-up by
# call_soon_threadsafe, a child process on pipes), returning "ok";
# ``run_work()`` on a new loop; ``no_other_thread()``; ``reap(pid)``.
WORK = """
import os, socket, threading, time

async def work():
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.01)
    a, b = socket.socketpair()
    a.setblocking(False)
    threading.Timer(0.02, b.send, (b"x",)).start()
    assert await asyncio.wait_for(loop.sock_recv(a, 1), 5) == b"x"
    a.close(); b.close()
    assert await asyncio.wait_for(loop.run_in_executor(None, sum, [1, 2]), 5) == 3
    woken = loop.create_future()
    threading.Timer(0.02, loop.call_soon_threadsafe, (woken.set_result, 1)).start()
    await asyncio.wait_for(woken, 5)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "print('hi')", stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(process.communicate(), 10)
    assert out == b"hi\\n" and process.returncode == 0
    return "ok"

def run_work():
    with asyncio.Runner(loop_factory=make_loop) as runner:
        return runner.run(work())

def no_other_thread(seconds=5.0):
    # Threads end a little after their work (a waitpid thread after its
    # child): wait for them, bounded.
    deadline = time.monotonic() + seconds
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t.name for t in threading.enumerate() if t is not threading.current_thread()]

def reap(pid, seconds=20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    return "hung"
"""


def run_child(loop_name: str, program: str, *, timeout: float = 30.0,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``program`` (dedented) in a new interpreter with ``make_loop`` bound to the row's factory.

    Returns the finished process (stdout, stderr as text).  Fails the test
    (``pytest.fail``) if it runs longer than ``timeout`` seconds, after
    killing its whole process group.
    """
    import pytest

    code = PRELUDE.format(spec=loop_spec(loop_name)) + textwrap.dedent(program)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"the child program did not finish in {timeout} s\n"
                    f"stdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)
