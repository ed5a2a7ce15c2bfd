# tests/conformance/test_debug.py
#
# Debug mode as asyncio has it (asyncio docs, "Developing with asyncio",
# "Debug Mode"): handles and tasks remember where they were made, an error
# report says so, a slow task step is logged naming the task, and the
# coroutine origin-tracking depth is the process's, set only while a loop
# in debug mode runs and put back after.  Also two small parts of the
# contract that debugging code leans on: weak references to handles, and a
# subprocess's pipe transports with asyncio's methods.
#
# Rules: as the rest of the suite (conftest.py).

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
import weakref

import pytest

from conformance.conftest import loop_factory, run


def test_handles_can_be_weakly_referenced(loop):
    handles = [loop.call_soon(print), loop.call_later(60, print), loop.call_at(loop.time() + 60, print)]
    refs = [weakref.ref(handle) for handle in handles]
    assert [ref() for ref in refs] == handles
    for handle in handles:
        handle.cancel()


def _schedule_a_failing_callback(loop, callback):
    loop.call_soon(callback)


def _boom():
    raise ValueError("boom")


def test_an_error_in_a_callback_says_where_it_was_scheduled(loop, caplog):
    """In debug mode the exception handler's context has ``source_traceback``, whose
    innermost frame is the code that called call_soon; the default handler prints it."""
    loop.set_debug(True)
    contexts = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))
    _schedule_a_failing_callback(loop, _boom)
    loop.call_soon(loop.stop)
    loop.run_forever()
    (context,) = contexts
    assert isinstance(context["exception"], ValueError)
    assert context["source_traceback"][-1].name == "_schedule_a_failing_callback"

    loop.set_exception_handler(None)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.default_exception_handler(context)
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "Object created at (most recent call last)" in text
    assert "_schedule_a_failing_callback" in text


def _make_a_task(loop):
    return loop.create_task(asyncio.sleep(0))


def test_a_task_made_in_debug_mode_says_where(loop):
    loop.set_debug(True)
    task = _make_a_task(loop)
    assert task._source_traceback[-1].name == "_make_a_task"  # not create_task's own frame
    run(loop, task)


async def _slow_coroutine():
    time.sleep(0.06)


@pytest.mark.blocks(reason="a slow callback is one that blocks")
def test_a_slow_task_step_is_logged_as_asyncio_logs_it(loop, caplog):
    """asyncio's words: "Executing <Task ...> took N seconds", the task itself named."""
    loop.set_debug(True)
    loop.slow_callback_duration = 0.03
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_until_complete(loop.create_task(_slow_coroutine()))
    slow = [record.getMessage() for record in caplog.records
            if record.getMessage().startswith("Executing")]
    assert any(re.match(r"^Executing <Task.*_slow_coroutine.*> took \d+\.\d+ seconds$",
                        message, re.S) for message in slow), slow


@pytest.mark.parametrize("debug", [False, True], ids=["normal", "debug"])
def test_the_coroutine_origin_tracking_depth_is_saved_and_restored(loop_name, debug):
    """A program's own depth (7 here) is left alone outside debug mode, replaced by
    asyncio's while a loop in debug mode runs, and put back when it stops."""
    async def depth_inside():
        return sys.get_coroutine_origin_tracking_depth()

    before = sys.get_coroutine_origin_tracking_depth()
    sys.set_coroutine_origin_tracking_depth(7)
    try:
        with asyncio.Runner(loop_factory=loop_factory(loop_name), debug=debug) as runner:
            inside = runner.run(depth_inside())
        after = sys.get_coroutine_origin_tracking_depth()
    finally:
        sys.set_coroutine_origin_tracking_depth(before)
    assert after == 7
    assert inside == (7 if not debug else 10)  # asyncio's constants.DEBUG_STACK_DEPTH


def test_a_subprocess_pipe_transports_have_asyncios_methods(loop):
    """stdin's transport is an asyncio.Transport whose reading methods exist (asyncio's
    raise NotImplementedError); stdout's can pause and resume reading."""
    async def main():
        transport, _ = await loop.subprocess_exec(
            asyncio.SubprocessProtocol, sys.executable, "-c", "pass",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        try:
            pipes = {fd: transport.get_pipe_transport(fd) for fd in (0, 1, 2)}
            stdout = pipes[1]
            stdout.pause_reading()
            paused = stdout.is_reading()
            stdout.resume_reading()
            return pipes, paused, stdout.is_reading()
        finally:
            transport.close()

    pipes, paused, resumed = run(loop, main())
    for fd, pipe in pipes.items():
        for method in ("pause_reading", "resume_reading", "is_reading", "close", "is_closing",
                       "get_extra_info"):
            assert callable(getattr(pipe, method, None)), (fd, method)
    for method in ("write", "writelines", "write_eof", "can_write_eof", "abort",
                   "get_write_buffer_size", "get_write_buffer_limits", "set_write_buffer_limits"):
        assert callable(getattr(pipes[0], method, None)), method
    assert (paused, resumed) == (False, True)
