# tests/conformance/test_timers_at_infinity.py
#
# A timer at infinity: call_later(math.inf), call_at(1e300), sleep(math.inf),
# wait_for(..., timeout=inf).  asyncio accepts any delay: the timer stays in
# its heap and never fires, and one wait is capped at a day
# (base_events.MAXIMUM_SELECT_TIMEOUT); uvloop clamps the delay to a century.
# The loop must go on as if the timer were not there: run other callbacks,
# poll I/O, take SIGINT, and use no CPU while it waits.
#
# Rules: each test runs in a child process (children.run_child) with a
# timeout, because the failure this file guards against (the loop arming
# libuv's timer with inf converted to an integer) is a spin that never
# returns to Python, which no in-process timeout could interrupt.

from __future__ import annotations

import pytest

from conformance.children import run_child


def _ok(result) -> str:
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stderr}"
    return result.stdout


@pytest.mark.parametrize("schedule", [
    "loop.call_later(math.inf, fired.append, 'later inf')",
    "loop.call_later(1e300, fired.append, 'later 1e300')",
    "loop.call_later(2.0 ** 64, fired.append, 'later 2**64')",
    "loop.call_at(math.inf, fired.append, 'at inf')",
    "loop.call_at(1e300, fired.append, 'at 1e300')",
    "loop.call_at(loop.time() + 10 ** 12, fired.append, 'at +1e12')",
])
def test_a_timer_at_infinity_never_fires_and_the_loop_goes_on(loop_name, schedule):
    out = _ok(run_child(loop_name, f"""
        import math, time
        async def main():
            loop = asyncio.get_running_loop()
            fired = []
            handle = {schedule}
            soon = []
            loop.call_later(0.05, soon.append, 1)
            started = time.monotonic()
            await asyncio.sleep(0.3)
            assert soon == [1], soon
            assert fired == [], fired
            assert handle.when() > loop.time() + 3600, handle.when()
            assert time.monotonic() - started < 2.0
            handle.cancel()
            await asyncio.sleep(0)
            print("ok")
        with asyncio.Runner(loop_factory=make_loop) as runner:
            runner.run(main())
    """, timeout=20))
    assert out.strip() == "ok"


def test_wait_for_with_an_infinite_timeout_returns_when_the_coroutine_does(loop_name):
    out = _ok(run_child(loop_name, """
        import time
        async def quick():
            await asyncio.sleep(0.1)
            return 42
        async def main():
            started = time.monotonic()
            result = await asyncio.wait_for(quick(), timeout=float("inf"))
            print(result, round(time.monotonic() - started, 1))
        with asyncio.Runner(loop_factory=make_loop) as runner:
            runner.run(main())
    """, timeout=20))
    result, elapsed = out.split()
    assert result == "42"
    assert float(elapsed) < 1.0, f"wait_for took {elapsed} s for a coroutine of 0.1 s"


def test_an_infinite_sleep_cancelled_by_another_task_uses_no_cpu(loop_name):
    # The process's CPU time while one task sleeps for ever and another
    # finishes after 0.5 s of wall time: an idle loop uses almost none
    # (measured: a few ms); a spinning one uses all 0.5 s.
    out = _ok(run_child(loop_name, """
        import math, time
        async def main():
            sleeper = asyncio.ensure_future(asyncio.sleep(math.inf))
            await asyncio.sleep(0)
            cpu, wall = time.process_time(), time.monotonic()
            await asyncio.sleep(0.5)
            sleeper.cancel()
            try:
                await sleeper
            except asyncio.CancelledError:
                pass
            print(sleeper.cancelled(), time.process_time() - cpu, time.monotonic() - wall)
        with asyncio.Runner(loop_factory=make_loop) as runner:
            runner.run(main())
    """, timeout=20))
    cancelled, cpu, wall = out.split()
    assert cancelled == "True"
    assert float(wall) < 2.0, f"0.5 s of sleep took {wall} s"
    assert float(cpu) < 0.15, f"the loop used {cpu} s of CPU in {wall} s of waiting"


def test_the_loop_polls_io_while_a_timer_waits_at_infinity(loop_name):
    # Data sent by another thread after 0.1 s: only a loop that polls (with
    # nothing else to wake it) sees it.
    out = _ok(run_child(loop_name, """
        import math, socket, threading
        async def main():
            loop = asyncio.get_running_loop()
            loop.call_later(math.inf, print, "fired")
            a, b = socket.socketpair()
            a.setblocking(False)
            threading.Timer(0.1, b.send, (b"ping",)).start()
            data = await loop.sock_recv(a, 16)
            print(data.decode())
            a.close(); b.close()
        with asyncio.Runner(loop_factory=make_loop) as runner:
            runner.run(main())
    """, timeout=20))
    assert out.strip() == "ping"


def test_ctrl_c_interrupts_an_infinite_sleep(loop_name):
    # asyncio.Runner turns SIGINT into the main task's cancellation and
    # then KeyboardInterrupt; the loop must be in a wait that a signal ends.
    result = run_child(loop_name, """
        import math, os, signal, threading
        async def main():
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                await asyncio.sleep(math.inf)
            except asyncio.CancelledError:
                print("main cancelled", flush=True)
                raise
        try:
            with asyncio.Runner(loop_factory=make_loop) as runner:
                runner.run(main())
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
    """, timeout=20)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["main cancelled", "KeyboardInterrupt"]
