# tests/conformance/test_errors_and_debug.py
#
# Errors with nowhere else to go, and debug mode: the exception handler
# family, set_debug/get_debug and the environment that turns debug on, slow
# callbacks named in the log, "Task exception was never retrieved",
# "coroutine ... was never awaited", unclosed transports.  Source: the asyncio
# docs, "Error Handling API", "Enabling debug mode", "Developing with asyncio".
#
# Rules: log lines are read from the "asyncio" logger (caplog), which is
# where programs look for them; the environment is tested in a child
# process, which makes its own loop of the same row.

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import time
import warnings

import pytest

from conformance.conftest import loop_spec, run


# -- The exception handler -------------------------------------------------------------

def test_exception_handler_set_get_and_reset(loop):
    def handler(loop, context):
        pass

    assert loop.get_exception_handler() is None
    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None
    with pytest.raises(TypeError):
        loop.set_exception_handler("not callable")


def test_call_exception_handler_reaches_the_handler_set(loop):
    contexts = []
    loop.set_exception_handler(lambda loop, context: contexts.append((loop, context)))
    context = {"message": "something happened", "exception": ValueError("why")}
    loop.call_exception_handler(context)
    assert contexts == [(loop, context)]


def test_default_exception_handler_logs_on_the_asyncio_logger(loop, caplog):
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        try:
            raise KeyError("the cause")
        except KeyError as exc:
            loop.default_exception_handler({"message": "a message for the log", "exception": exc})
        loop.call_exception_handler({"message": "through call_exception_handler"})
    messages = [record.getMessage() for record in caplog.records if record.name == "asyncio"]
    assert any("a message for the log" in message for message in messages)
    assert any("through call_exception_handler" in message for message in messages)
    record = next(record for record in caplog.records if "a message for the log" in record.getMessage())
    assert record.levelno == logging.ERROR and record.exc_info[0] is KeyError


def test_a_handler_that_raises_is_reported_by_the_default_one(loop, caplog):
    def broken(loop, context):
        raise RuntimeError("the handler broke")

    loop.set_exception_handler(broken)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_exception_handler({"message": "original"})
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "Unhandled error in exception handler" in text


def test_a_tasks_unretrieved_exception_reaches_the_handler(loop):
    contexts = []
    loop.set_exception_handler(lambda loop, context: contexts.append(context))

    async def fail():
        raise ZeroDivisionError("nobody asked")

    async def main():
        task = asyncio.ensure_future(fail())
        await asyncio.sleep(0.01)
        assert task.done()

    run(loop, main())
    gc.collect()
    assert len(contexts) == 1
    assert contexts[0]["message"] == "Task exception was never retrieved"
    assert isinstance(contexts[0]["exception"], ZeroDivisionError)


# -- Debug mode ---------------------------------------------------------------------------

def test_set_debug_and_get_debug(loop):
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


@pytest.mark.parametrize("how", ["PYTHONASYNCIODEBUG=1", "-X dev", "neither"])
def test_debug_mode_follows_the_environment(loop_name, how):
    module, _, factory = loop_spec(loop_name).partition(":")
    code = ("import importlib, sys; "
            f"loop = getattr(importlib.import_module({module!r}), {factory!r})(); "
            "print(loop.get_debug()); loop.close()")
    env = {key: value for key, value in os.environ.items() if key not in
           ("PYTHONASYNCIODEBUG", "PYTHONDEVMODE", "TINYLOOP_DEBUG")}
    args = [sys.executable]
    if how == "PYTHONASYNCIODEBUG=1":
        env["PYTHONASYNCIODEBUG"] = "1"
    elif how == "-X dev":
        args += ["-X", "dev"]
    result = subprocess.run([*args, "-c", code], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("False" if how == "neither" else "True")


def _slow_callback():
    time.sleep(0.06)


async def _slow_coroutine():
    time.sleep(0.06)


@pytest.mark.blocks(reason="a slow callback is one that blocks")
def test_a_slow_callback_is_logged_by_name_in_debug_mode(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.03
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(_slow_callback)
        loop.call_soon(loop.stop)
        loop.run_forever()
    slow = [record.getMessage() for record in caplog.records if "Executing" in record.getMessage()]
    assert len(slow) == 1
    assert "_slow_callback" in slow[0] and "seconds" in slow[0]


@pytest.mark.blocks(reason="a slow callback is one that blocks")
def test_a_slow_task_step_is_logged_naming_the_task(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.03
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        # A task of its own: from 3.12, wait_for (in run) steps its coroutine in its own task.
        loop.run_until_complete(loop.create_task(_slow_coroutine()))
    slow = [record.getMessage() for record in caplog.records if "Executing" in record.getMessage()]
    assert slow and any("_slow_coroutine" in message for message in slow)


@pytest.mark.blocks(reason="a slow callback is one that blocks")
def test_no_slow_callback_log_outside_debug_mode(loop, caplog):
    loop.set_debug(False)
    loop.slow_callback_duration = 0.01
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(_slow_callback)
        loop.call_soon(loop.stop)
        loop.run_forever()
    assert not [record for record in caplog.records if "Executing" in record.getMessage()]


async def _never_awaited():
    pass


def test_a_coroutine_never_awaited_warns_and_in_debug_mode_says_where_it_was_made(loop):
    loop.set_debug(True)

    async def main():
        _never_awaited()  # dropped at once
        gc.collect()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(loop, main())
        gc.collect()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    ours = [message for message in messages if "_never_awaited" in message]
    assert ours and "was never awaited" in ours[0]
    assert "Coroutine created at" in ours[0]  # origin tracking, on while the loop runs


def test_an_unclosed_transport_warns_resource_warning(loop, listener):
    async def main():
        transport, _ = await loop.create_connection(asyncio.Protocol, *listener.getsockname())
        conn, _ = await loop.sock_accept(listener)
        return conn  # kept open: the transport sees no EOF and stays open

    conn = run(loop, main())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.close()  # drops the loop's references to the transport
        gc.collect()
    conn.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert any("unclosed" in message for message in messages), messages  # uvloop: "resource"
