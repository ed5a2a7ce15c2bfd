# tests/conformance/test_installing.py
#
# How programs get a loop without naming it: the policy, asyncio.Runner's
# loop_factory, and the package's run() (uvloop's face, which tinyloop.aio
# copies).  Source: the asyncio docs, "Policies", "Runners"; uvloop's README.
#
# Rules: each test restores the policy it replaced; the asyncio row uses
# asyncio's own default policy and asyncio.run, so the three rows are the
# same sentences with a different package.

from __future__ import annotations

import asyncio
import sys
import warnings

import pytest

from conformance.conftest import loop_factory, loop_package


@pytest.fixture
def package(loop_name):
    return loop_package(loop_name)


@pytest.fixture
def loop_class(loop_name):
    probe = loop_factory(loop_name)()
    probe.close()
    return type(probe)


@pytest.fixture
def restore_policy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # policies, from 3.14
        old = asyncio.get_event_loop_policy()
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(old)


def _policy(package):
    if package is asyncio:
        return asyncio.DefaultEventLoopPolicy()
    return package.EventLoopPolicy()


async def _running_loop_type_and_debug():
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0)
    return type(loop), loop.get_debug()


def test_the_policy_makes_new_event_loop_and_asyncio_run_use_the_loop(
        package, loop_class, restore_policy):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(_policy(package))
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(loop, loop_class)
    finally:
        loop.close()
    kind, _ = asyncio.run(_running_loop_type_and_debug())
    assert issubclass(kind, loop_class)


def test_runner_with_loop_factory(loop_name, loop_class):
    with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, loop_class)
        kind, _ = runner.run(_running_loop_type_and_debug())
        assert runner.run(asyncio.sleep(0, "again")) == "again"
    assert loop.is_closed()
    assert issubclass(kind, loop_class)


def test_the_packages_run_with_debug(package, loop_class):
    kind, debug = package.run(_running_loop_type_and_debug(), debug=True)
    assert issubclass(kind, loop_class) and debug is True


def test_run_cancels_what_main_left_behind_and_closes_async_generators(package):
    log = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            log.append("agen closed")

    async def main():
        asyncio.ensure_future(forever())
        gen = agen()
        await gen.__anext__()
        main.gen = gen  # keep it alive: shutdown_asyncgens must close it
        await asyncio.sleep(0)

    package.run(main())
    assert sorted(log) == ["agen closed", "cancelled"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="asyncio.run's loop_factory is new in 3.12")
def test_asyncio_run_with_loop_factory(loop_name, loop_class):
    kind, _ = asyncio.run(_running_loop_type_and_debug(), loop_factory=loop_factory(loop_name))
    assert issubclass(kind, loop_class)


def test_ctrl_c_cancels_main_and_raises_keyboard_interrupt(loop_name):
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches the main thread only")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("another SIGINT handler is installed: asyncio.Runner would leave it alone")
    log = []

    async def main():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("main cancelled")
            raise

    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with asyncio.Runner(loop_factory=loop_factory(loop_name)) as runner:
                runner.run(main())
    finally:
        timer.cancel()
    assert log == ["main cancelled"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(sys.platform == "win32" or sys.version_info >= (3, 14),
                    reason="child watchers are Unix-only, and gone in 3.14")
@pytest.mark.differs(loops=("aio", "uv", "ring", "uvloop"), reason=(
    "the policy has no child watcher (get_child_watcher/set_child_watcher raise "
    "NotImplementedError): the loop watches its own children, and asyncio deprecated "
    "watchers in 3.12"))
def test_the_policy_gives_a_child_watcher(package):
    policy = _policy(package)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = policy.get_child_watcher()
    assert hasattr(watcher, "add_child_handler")
