# tests/conformance/test_fork_exit.py
#
# fork(2) and exit, on every loop: a process that forks from inside a
# running loop or from outside one, a child that runs a loop of its own
# (by hand, or as a multiprocessing "fork" worker calling asyncio.run under
# the loop's policy), and a program that simply ends.  Each must exit,
# parent and child, leaving no process and no thread behind.
#
# What asyncio documents and does in a fork child: the running-loop state is
# cleared (asyncio.get_running_loop() raises; CPython 3.11 checks the pid,
# 3.12+ clears it with os.register_at_fork), so the child can run a new
# loop.  A loop made in the parent is not for the child to use: it shares
# the parent's epoll and self-pipe.  tinyloop.uv does more (uv_loop_fork,
# tests/test_uv_fork.py); these tests ask only what asyncio gives.
#
# Rules: every scenario is a child program (children.run_child) with a
# timeout, so a hang fails the test; a program reports the pids it forked,
# and the test checks each is gone once the program has exited.

from __future__ import annotations

import os

import pytest

from conformance.children import WORK, run_child

class _Lines(list):
    """A program's stdout words; shown with its stderr when an assertion fails."""

    def __init__(self, result):
        super().__init__(result.stdout.split())
        self.stderr = result.stderr

    def __repr__(self):
        return f"{list(self)!r}\nstderr:\n{self.stderr}"


def _finished(result) -> _Lines:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr}"
    return _Lines(result)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_fork_inside_a_running_loop_and_run_a_loop_in_the_child(loop_name):
    lines = _finished(run_child(loop_name, WORK + """
async def main():
    await work()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                asyncio.get_running_loop()
                print("child-sees-a-running-loop")
            except RuntimeError:
                pass
            if run_work() == "ok" and not no_other_thread():
                code = 0
        finally:
            sys.stdout.flush()
            os._exit(code)
    print("child", pid)
    print("child-exit", await asyncio.get_running_loop().run_in_executor(None, reap, pid))
    print("parent", await work())

with asyncio.Runner(loop_factory=make_loop) as runner:
    runner.run(main())
print("threads", len(no_other_thread()))
""", timeout=60))
    assert "child-sees-a-running-loop" not in lines
    assert lines[lines.index("child-exit") + 1] == "0"
    assert lines[lines.index("parent") + 1] == "ok"
    assert lines[lines.index("threads") + 1] == "0"
    assert _gone(int(lines[lines.index("child") + 1]))


def test_fork_outside_a_loop_and_run_a_loop_in_the_child(loop_name):
    # The parent's loop exists (and has run) but is not running at the
    # fork; the child runs a new loop, then leaves with os._exit, as
    # multiprocessing's children do.  (Not sys.exit: finalizing the copy of
    # the parent's loop would close it, and asyncio's close takes the
    # self-pipe out of the epoll it shares with the parent, whose
    # call_soon_threadsafe then wakes nobody.  tinyloop.uv allows even that:
    # tests/test_uv_fork.py.)
    lines = _finished(run_child(loop_name, WORK + """
loop = make_loop()
assert loop.run_until_complete(work()) == "ok"
pid = os.fork()
if pid == 0:
    ok = run_work() == "ok" and not no_other_thread()
    sys.stdout.flush()
    os._exit(0 if ok else 1)
print("child", pid)
print("child-exit", reap(pid))
print("parent", loop.run_until_complete(work()))
loop.run_until_complete(loop.shutdown_default_executor())
loop.close()
print("threads", len(no_other_thread()))
""", timeout=60))
    assert lines[lines.index("child-exit") + 1] == "0"
    assert lines[lines.index("parent") + 1] == "ok"
    assert lines[lines.index("threads") + 1] == "0"
    assert _gone(int(lines[lines.index("child") + 1]))


@pytest.mark.parametrize("where", ["inside the loop", "outside any loop", "from a thread"])
def test_a_multiprocessing_fork_worker_calls_asyncio_run_under_the_policy(loop_name, where):
    # CPython's test_fork_asyncio_run (3.12), with the row's policy installed
    # (the asyncio row: asyncio's own): the worker's asyncio.run must make
    # a loop of the row and not find the parent's running.
    lines = _finished(run_child(loop_name, WORK + """
import multiprocessing
for name in (make_loop.__module__, make_loop.__module__.rpartition(".")[0]):
    module = sys.modules.get(name)
    if module is not None and hasattr(module, "EventLoopPolicy"):
        asyncio.set_event_loop_policy(module.EventLoopPolicy())
        break
ctx = multiprocessing.get_context("fork")
kind = type(make_loop()).__name__

def worker(queue):
    async def child_main():
        result = await work()
        return result, type(asyncio.get_running_loop()).__name__
    queue.put(asyncio.run(child_main()))

def start_and_join():
    queue = ctx.SimpleQueue()
    process = ctx.Process(target=worker, args=(queue,))
    process.start()
    process.join(20)
    result = queue.get() if process.exitcode == 0 else None
    return process.pid, process.exitcode, result

async def main():
    if WHERE == "inside the loop":
        return start_and_join()
    # A plain thread while the loop runs in the main thread (uvloop's
    # test_signals_fork_in_thread); not an executor worker, whose child
    # 3.11's multiprocessing ends with exit code 1 on every loop.
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    threading.Thread(target=lambda: loop.call_soon_threadsafe(
        done.set_result, start_and_join())).start()
    return await done

if WHERE == "outside any loop":
    pid, code, result = start_and_join()
else:
    pid, code, result = asyncio.run(main())
print("child", pid, "exit", code, "result", result[0] if result else None,
      "same-kind", result is not None and result[1] == kind)
print("threads", len(no_other_thread()))
""".replace("WHERE", repr(where)), timeout=60))
    assert lines[lines.index("exit") + 1] == "0", lines
    assert lines[lines.index("result") + 1] == "ok"
    assert lines[lines.index("same-kind") + 1] == "True"
    assert lines[lines.index("threads") + 1] == "0"
    assert _gone(int(lines[lines.index("child") + 1]))


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "left-open"])
def test_a_program_exits_after_its_loop_with_nothing_left(loop_name, closed):
    # A program that served a connection, ran a child process and an
    # executor job, and has a timer pending at infinity, ends: closing its
    # loop, or (left-open) leaving it to the interpreter's exit.
    lines = _finished(run_child(loop_name, WORK + """
import math, warnings
warnings.simplefilter("ignore")

async def serve():
    loop = asyncio.get_running_loop()
    async def hello(reader, writer):
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hello, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    assert await reader.read(5) == b"hello"
    loop.call_later(math.inf, print, "fired")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    print("grandchild", process.pid)
    await process.wait()
    return await work(), server, writer

loop = make_loop()
result, server, writer = loop.run_until_complete(serve())
print("result", result)
if CLOSED:
    writer.close()
    server.close()
    loop.run_until_complete(server.wait_closed())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
    print("threads", len(no_other_thread()))
sys.stdout.flush()
""".replace("CLOSED", repr(closed)), timeout=60))
    assert lines[lines.index("result") + 1] == "ok", lines
    if closed:
        assert lines[lines.index("threads") + 1] == "0"
    assert _gone(int(lines[lines.index("grandchild") + 1]))


@pytest.mark.parametrize("shutdown", [True, False], ids=["shut-down", "left-to-exit"])
def test_a_process_pool_from_inside_the_loop_whose_workers_run_loops(loop_name, shutdown):
    # CPython's test_get_event_loop_new_process, as a program: a "fork"
    # ProcessPoolExecutor used through run_in_executor (its workers are
    # forked from inside the running loop, while the loop's own threads
    # exist), each worker making and running a loop of the row; one job
    # cancelled while it runs.  The pool is shut down, or left to the
    # interpreter's exit (concurrent.futures joins it then); either way the
    # program ends, and its workers with it.
    lines = _finished(run_child(loop_name, WORK + """
import concurrent.futures, multiprocessing

def in_worker(n):
    async def doit():
        await asyncio.sleep(0.01)
        return os.getpid(), n * 2
    loop = make_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(doit())
    finally:
        loop.close()

async def main():
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=2, mp_context=multiprocessing.get_context("fork"))
    results = await asyncio.wait_for(asyncio.gather(
        *(loop.run_in_executor(pool, in_worker, n) for n in range(4))), 30)
    slow = loop.run_in_executor(pool, time.sleep, 0.5)
    await asyncio.sleep(0.05)
    slow.cancel()
    try:
        await slow
    except asyncio.CancelledError:
        pass
    print("results", *[doubled for _, doubled in results])
    print("workers", *sorted({pid for pid, _ in results}))
    if SHUTDOWN:
        await loop.run_in_executor(None, pool.shutdown, True)
    return pool

with asyncio.Runner(loop_factory=make_loop) as runner:
    pool = runner.run(main())
print("done", flush=True)
""".replace("SHUTDOWN", repr(shutdown)), timeout=60))
    assert lines[lines.index("results") + 1:lines.index("results") + 5] == ["0", "2", "4", "6"]
    assert lines[-1] == "done"
    workers = [int(pid) for pid in lines[lines.index("workers") + 1:lines.index("done")]]
    assert workers and all(_gone(pid) for pid in workers)


def test_ctrl_c_reaches_a_loop_in_a_child_forked_from_a_thread(loop_name):
    # Forked from a thread other than the main one (uvloop's issue 452):
    # that thread is the child's main thread, the one Python runs signal
    # handlers in, so Ctrl-C must reach a loop the child runs there.
    lines = _finished(run_child(loop_name, WORK + """
import math, signal

def child():
    async def forever():
        print("child-ready", flush=True)
        await asyncio.sleep(math.inf)
    try:
        with asyncio.Runner(loop_factory=make_loop) as runner:
            runner.run(forever())
    except KeyboardInterrupt:
        os._exit(42)
    os._exit(1)

def fork_here(result):
    pid = os.fork()
    if pid == 0:
        child()
    result.append(pid)

async def main():
    result = []
    thread = threading.Thread(target=fork_here, args=(result,))
    thread.start()
    await asyncio.get_running_loop().run_in_executor(None, thread.join)
    return result[0]

# Not asyncio.Runner in the parent: its SIGINT handler would be the
# child's too (fork copies it), and the child's Runner would leave it be.
loop = make_loop()
pid = loop.run_until_complete(main())
loop.close()
time.sleep(1.0)   # the child starts its loop
os.kill(pid, signal.SIGINT)
print("child", pid, "exit", reap(pid, 10))
""", timeout=60))
    assert "child-ready" in lines
    assert lines[lines.index("exit") + 1] == "42", lines
