# tests/test_uv_fork.py
#
# What tinyloop.uv promises in a fork(2) child beyond asyncio's contract
# (tests/conformance/test_fork_exit.py has that): a loop made in the parent
# may go on being used, closed or dropped in the child, because the at-fork
# hook in tinyloop/uv/_loop.pyx gives it a kernel state of its own
# (uv_loop_fork: a new epoll and wake-up eventfd; a new self-pipe under the
# old descriptor numbers; a cleared async flag; a new default executor).
# The parent's loop is untouched by anything the child does.
#
# Rules: each scenario is a child program with a timeout (a hang fails the
# test); the parent program reaps its child with a bounded wait.

from __future__ import annotations

import textwrap

import pytest
from conformance.children import WORK, run_child

pytest.importorskip("tinyloop.uv.loop", reason="tinyloop.uv's extension is not built here")

# WORK (tests/conformance/children.py) and a signal handler's round trip;
# ``loop`` is a tinyloop.uv loop that has run once, made before any fork.
PROGRAM = WORK + """
import signal

async def signalled():
    loop = asyncio.get_running_loop()
    got = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, got.set_result, "signal")
    os.kill(os.getpid(), signal.SIGUSR1)
    try:
        return await asyncio.wait_for(got, 5)
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)

loop = make_loop()
loop.run_until_complete(work())
"""


def _run(program: str) -> list[str]:
    result = run_child("uv", PROGRAM + textwrap.dedent(program), timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_the_child_goes_on_with_the_parents_loop_and_both_work():
    lines = _run("""
        pid = os.fork()
        if pid == 0:
            results = [loop.run_until_complete(work()), loop.run_until_complete(signalled())]
            loop.close()
            print("child", *results, flush=True)
            sys.exit(0)
        print("child-exit", reap(pid))
        print("parent", loop.run_until_complete(work()), loop.run_until_complete(signalled()))
        loop.close()
    """)
    assert lines[lines.index("child") + 1:lines.index("child") + 3] == ["ok", "signal"]
    assert lines[lines.index("child-exit") + 1] == "0"
    assert lines[lines.index("parent") + 1:] == ["ok", "signal"]


def test_a_child_that_closes_or_drops_the_loop_leaves_the_parents_alone():
    # The parent has a signal handler (its wake-up fd is the self-pipe) and
    # threads that wake it; the child closes the loop (first child) or
    # leaves it to the interpreter's exit (second).  asyncio's close in a
    # child takes the shared self-pipe out of the parent's epoll.
    lines = _run("""
        for how in ("close", "drop"):
            pid = os.fork()
            if pid == 0:
                if how == "close":
                    loop.close()
                sys.exit(0)
            print(how, reap(pid))
            print("parent", loop.run_until_complete(work()), loop.run_until_complete(signalled()))
        loop.close()
    """)
    assert lines == ["close", "0", "parent", "ok", "signal", "drop", "0", "parent", "ok", "signal"]


def test_fork_inside_a_callback_and_the_child_goes_on_after_the_run():
    # Forked while the loop runs (from a task): the child's running-loop
    # state is cleared (asyncio's rule), the run it was in finishes, and the
    # child then runs the same loop again, with a state of its own.
    lines = _run("""
        async def fork_here():
            await asyncio.sleep(0)
            return os.fork()

        pid = loop.run_until_complete(fork_here())
        if pid == 0:
            print("child", loop.run_until_complete(work()), flush=True)
            loop.close()
            os._exit(0)
        print("child-exit", reap(pid))
        print("parent", loop.run_until_complete(work()))
        loop.close()
    """)
    assert lines[lines.index("child") + 1] == "ok"
    assert lines[lines.index("child-exit") + 1] == "0"
    assert lines[lines.index("parent") + 1] == "ok"
