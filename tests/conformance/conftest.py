# tests/conformance/conftest.py
#
# The rows of the conformance suite: every test in this package runs once per
# asyncio event loop (uvloop's _TestBase pattern, written as a fixture).
#
#     asyncio    the standard library's loop: the reference row
#     uvloop     libuv's, where installed: a second opinion
#     rloop      a loop in Rust (rloop): a row only when asked for, with
#                TINYLOOP_CONFORMANCE_ROWS=rloop (KNOWN_DIFFERENCES.md says
#                why: on 0.5.0 half the suite fails and a panic can abort the
#                interpreter)
#     <stage>    every stage of tinyloop/stages.py whose ``loop`` factory
#                makes an asyncio.AbstractEventLoop (``aio`` and ``uv``):
#                the rows under test.  A stage whose loop does not import
#                here (``uv`` without libuv) keeps its row, skipped with
#                the message that says what to install.
#
# Rules this file keeps:
#   * A test is written once, against the public asyncio API, and takes the
#     ``loop`` fixture.  It runs coroutines with ``run(loop, coro)``, which
#     bounds each in time (RUN_TIMEOUT seconds): a hang fails, it never stalls
#     the suite.
#   * A test that fails on the asyncio row is a wrong test.  A test that
#     fails on a tinyloop row because of a known, reasoned difference carries
#     ``@pytest.mark.differs(reason=...)``: on the tinyloop rows it becomes
#     ``xfail(strict=True)``, so the day the difference goes the mark must go
#     too.  Every such mark is listed in KNOWN_DIFFERENCES.md (a test checks).
#     ``@pytest.mark.differs(reason=..., loops=("uvloop",))`` does the same for
#     the uvloop row, where uvloop itself departs from asyncio; ``when=`` (a
#     bool, e.g. a Python version test) limits a mark to where it holds.
#   * Every loop is closed after its test, its async generators and default
#     executor shut down first, as asyncio.run does.
#   * No blocking call in the loop's thread: every test of a row runs under
#     blockbuster (``no_blocking_calls``, the fixture its authors advise),
#     which raises BlockingError when code running inside a loop calls a
#     blocking function (time.sleep, a read on a blocking descriptor, ...).
#     It runs on the reference rows too: a test that blocks there is a wrong
#     test.  What it allows beyond blockbuster's own list is below, each with
#     its reason.

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import pkgutil
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from tinyloop import stages

# Seconds any one run(loop, coro) may take before the test fails.
RUN_TIMEOUT = 15.0


def _stage_loops() -> tuple[dict[str, Callable[[], asyncio.AbstractEventLoop]], dict[str, str]]:
    """The stages whose ``loop`` factory makes an asyncio loop: (factories, unavailable).

    ``factories`` maps a stage name to its factory; ``unavailable`` maps a
    stage whose factory does not import here (Part IV's extension, built
    only where libuv is) to the ImportError's message, which says what to
    install: that row is kept, and skipped with the message.  Part II's
    reactor is a loop too, but not an asyncio one: its rows are in the
    behaviour suite (tests/behaviour/) only.  Which kind a factory makes is
    found by making one.
    """
    rows: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {}
    unavailable: dict[str, str] = {}
    for stage in stages.STAGES:
        if stage.loop is None:
            continue
        try:
            factory = pkgutil.resolve_name(stage.loop)
        except ImportError as error:
            unavailable[stage.name] = str(error)
            continue
        probe = factory()
        try:
            if isinstance(probe, asyncio.AbstractEventLoop):
                rows[stage.name] = factory
        finally:
            probe.close()
    return rows, unavailable


def stages_in_order(*groups: dict[str, Any]) -> list[str]:
    """The stage names of ``groups``, in the registry's reading order."""
    return [stage.name for stage in stages.STAGES if any(stage.name in group for group in groups)]


def skip_if_unavailable(name: str) -> None:
    """``pytest.skip`` the row ``name`` with the reason its loop cannot be made here."""
    if name in UNAVAILABLE:
        pytest.skip(f"{name}: {UNAVAILABLE[name]}")
    if name in PEER_LOOPS and PEER_LOOPS[name] is None:
        pytest.skip(f"{name} is not installed")


def _peer_factory(module: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``module.new_event_loop``, or None when ``module`` does not import here."""
    try:
        return importlib.import_module(module).new_event_loop
    except ImportError:
        return None


STAGE_LOOPS, UNAVAILABLE = _stage_loops()
# The loops of other projects, second opinions beside asyncio: None where not installed.
PEER_LOOPS = {name: _peer_factory(name) for name in ("uvloop", "rloop")
              if name == "uvloop" or name in os.environ.get("TINYLOOP_CONFORMANCE_ROWS", "").split(",")}
UVLOOP = PEER_LOOPS["uvloop"]
# Every row, an unavailable one included (it skips, saying why).
LOOP_NAMES = ["asyncio", *PEER_LOOPS, *stages_in_order(STAGE_LOOPS, UNAVAILABLE)]


def loop_spec(name: str) -> str:
    """The row's factory as "module:attribute", for a child process to make the same loop."""
    if name == "asyncio":
        return "asyncio:SelectorEventLoop"
    if name in PEER_LOOPS:
        return f"{name}:new_event_loop"
    return stages.get(name).loop  # type: ignore[return-value]


def loop_package(name: str) -> Any:
    """The module with the row's ``EventLoopPolicy``, ``new_event_loop`` and ``run``.

    asyncio's own, uvloop, and for a stage the package its factory lives in
    (``tinyloop.aio``), which must offer the three names uvloop does.
    """
    import importlib

    skip_if_unavailable(name)
    module = loop_spec(name).partition(":")[0]
    return importlib.import_module(module)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The factory of the row called ``name``.

    ``pytest.skip`` for an absent uvloop, and for a stage whose loop does
    not import here (with the message that says what to install).
    """
    if name == "asyncio":
        return asyncio.SelectorEventLoop if sys.platform != "win32" else asyncio.new_event_loop
    skip_if_unavailable(name)
    if name in PEER_LOOPS:
        return PEER_LOOPS[name]  # type: ignore[return-value]
    return STAGE_LOOPS[name]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "differs(reason, loops=..., when=True): a known difference from asyncio; "
                   "xfail(strict) on those rows (default: the tinyloop rows); listed in "
                   "KNOWN_DIFFERENCES.md")
    config.addinivalue_line(
        "markers", "blocks(reason): the test blocks the loop's thread on purpose (a slow "
                   "callback); it runs without blockbuster")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        row = callspec.params.get("loop_name") if callspec else None
        if row is None:
            continue
        for mark in item.iter_markers("differs"):
            loops = mark.kwargs.get("loops", (*STAGE_LOOPS, *UNAVAILABLE))
            if row in loops and mark.kwargs.get("when", True):
                item.add_marker(pytest.mark.xfail(strict=True, reason=mark.kwargs["reason"]))


@pytest.fixture(params=LOOP_NAMES)
def loop_name(request: pytest.FixtureRequest) -> str:
    skip_if_unavailable(request.param)
    return request.param


# What the loops may do in their own thread that blockbuster flags, beyond
# what it allows asyncio already: (function, file, the functions on the
# stack where it is allowed).  asyncio's entries name asyncio's files
# (blockbuster matches "asyncio/unix_events.py"); ours are the same calls
# in tinyloop's files.
ALLOWED_BLOCKING = [
    # Popen's one short read of its error pipe: it returns once the child
    # has called exec (the pipe is close-on-exec) or has failed to, with the
    # errno.  asyncio makes the same read in the loop's thread, and
    # blockbuster allows it there (base_events.subprocess_exec); uvloop and
    # tinyloop.uv start the child with libuv and read nothing (uv, unless a
    # keyword such as preexec_fn sends it to Popen: tests/test_uv_spawn.py).
    # We allow exactly that read, Popen's, as chapters/asyncio.md explains.
    ("os.read", "subprocess.py", {"_execute_child"}),
    # A UNIX server's socket file: create_unix_server removes a stale one
    # and close removes its own, as asyncio does (blockbuster allows asyncio's
    # create_unix_server and _stop_serving the same calls).
    ("os.stat", "tinyloop/aio/unix_events.py", {"create_unix_server", "_stop_serving"}),
    ("os.unlink", "tinyloop/aio/unix_events.py", {"create_unix_server", "_stop_serving"}),
    ("os.remove", "tinyloop/aio/unix_events.py", {"create_unix_server"}),
    # The same for a UNIX datagram endpoint's stale file (asyncio's check is
    # in create_datagram_endpoint, which blockbuster does not list).
    ("os.stat", "asyncio/base_events.py", {"create_datagram_endpoint"}),
    ("os.remove", "asyncio/base_events.py", {"create_datagram_endpoint"}),
    ("os.stat", "tinyloop/aio/unix_events.py", {"_datagram_socket"}),
    ("os.remove", "tinyloop/aio/unix_events.py", {"_datagram_socket"}),
    # sendfile(2) on a non-blocking socket: it sends what the socket takes
    # now, but may wait for the disk to read the file's pages, as asyncio's
    # (allowed in its sendfile and _sock_sendfile_native_impl).  Ours goes
    # through the sock_* machinery: the first try, then the retries.
    ("os.sendfile", "tinyloop/aio/selector_events.py", {"_sock_call", "_sock_retry"}),
]


@pytest.fixture(autouse=True)
def no_blocking_calls(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test of a row runs under blockbuster: a blocking call inside a loop fails it."""
    if "loop_name" not in request.fixturenames or request.node.get_closest_marker("blocks"):
        yield
        return
    import blockbuster

    with blockbuster.blockbuster_ctx() as detector:
        for name, filename, functions in ALLOWED_BLOCKING:
            detector.functions[name].can_block_in(filename, functions)
            if filename.startswith("tinyloop/"):
                # The module's file of the moment: the exercise checker
                # replaces it with a student's (TINYLOOP_OVERRIDE).
                module = importlib.import_module(filename[:-len(".py")].replace("/", "."))
                detector.functions[name].can_block_in(module.__file__, functions)
        yield


@pytest.fixture
def loop(loop_name: str) -> Iterator[asyncio.AbstractEventLoop]:
    """A new event loop of this row, set as the current loop; closed after the test."""
    loop = loop_factory(loop_name)()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        try:
            if not loop.is_closed() and not loop.is_running():
                _cancel_all_tasks(loop)
                loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), RUN_TIMEOUT))
                loop.run_until_complete(
                    asyncio.wait_for(loop.shutdown_default_executor(), RUN_TIMEOUT))
        finally:
            loop.close()
            asyncio.set_event_loop(None)
            gc.collect()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=RUN_TIMEOUT))


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
        timeout: float = RUN_TIMEOUT) -> Any:
    """Run ``coro`` on ``loop`` to completion, failing after ``timeout`` seconds."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A non-blocking TCP socket listening on 127.0.0.1 (a free port), closed after the test."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    yield sock
    sock.close()
