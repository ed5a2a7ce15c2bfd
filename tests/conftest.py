"""Shared test setup.

The exercise checker runs these tests with ``TINYLOOP_OVERRIDE`` naming a
student's file; applying it here, before any test module imports tinyloop's
stage modules, makes the in-process tests use the student's code too (the
servers the tests start apply it themselves, in ``stages.load``).
"""

from __future__ import annotations

import tinyloop._override

tinyloop._override.apply_override()

import gc  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from fakes import FakeSelector, VirtualClock  # noqa: E402

from tinyloop.callbacks.loop import Loop  # noqa: E402


# --- the cyclic garbage collector -------------------------------------------------
#
# Many tests call gc.collect() to have a lost exception or an unclosed
# transport reported inside the test that caused it.  A full collection walks
# every tracked object, and once the whole suite is collected that is the
# modules, the items and their fixtures' definitions: ~160,000 objects, a
# tenth of a second per call on this machine (a second and more under load),
# hundreds of times per worker.  What exists when collection ends lives until
# the session ends anyway, so it is frozen (gc.freeze(), as the gc docs
# advise for a forking server's preloaded state): collections then walk only
# what the tests made.  A test that asks the collector who holds an object
# (gc.get_referrers, which skips frozen objects) runs with everything
# unfrozen, so a holder made at import time is still found.

def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is None or "get_referrers" not in code.co_names:
        return (yield)
    gc.unfreeze()
    try:
        return (yield)
    finally:
        gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker, put the tests that declare a time limit above the
    ini's ``timeout`` first, the longest limit first (a stable sort).

    The scheduler hands out tests in collection order; a whole-book build
    (minutes) handed out last would run alone on one worker at the end.
    Without workers the order is left as it is (the exercise checker's runs).
    """
    if not hasattr(config, "workerinput"):
        return
    default = float(config.getini("timeout") or 0)

    def limit(item: pytest.Item) -> float:
        mark = item.get_closest_marker("timeout")
        seconds = mark.args[0] if mark is not None and mark.args else 0
        return seconds if isinstance(seconds, (int, float)) and seconds > default else 0

    items.sort(key=lambda item: -limit(item))


@pytest.fixture(autouse=True)
def _sigint_restored() -> Iterator[None]:
    """Give the next test the SIGINT handler this one started with.

    A test that leaves SIGINT ignored (SIG_IGN) would pass that on to every
    child process the next tests of its pytest-xdist worker start, and their
    Ctrl-C tests would then wait in vain.
    """
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)


# --- Part II's reactor on a virtual clock and a scripted selector --------------------
#
# tests/fakes.py: time moves only when the test says, and readiness is what the
# test scripts.  A test module that needs another start time overrides ``clock``.

@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(100.0)


@pytest.fixture
def selector(clock: VirtualClock) -> FakeSelector:
    return FakeSelector(clock)


@pytest.fixture
def loop(selector: FakeSelector, clock: VirtualClock) -> Iterator[Loop]:
    """tinyloop.callbacks' Loop on ``selector`` and ``clock``, closed after the test."""
    loop = Loop(selector=selector, clock=clock)
    yield loop
    loop.close()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair of non-blocking sockets (socketpair(2)), closed after the test."""
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


# --- stages and loops that may not be built here --------------------------------
#
# Part IV (tinyloop.uv) is a C extension, built only where libuv and a C
# compiler are.  Every test that runs once per stage or per loop takes its
# parameters from these two helpers, so a row that cannot run here is
# skipped with the message that says what to install, and never fails.

# One stage from each Part of the book (I readiness, II the loop of callbacks
# grown to coroutines, III asyncio's loop, IV libuv's): a per-stage test whose
# rows take seconds each runs these rows in the default step and the others in
# the slow step (stage_params's ``default``), so CI still runs every stage.
ONE_PER_PART = ("epoll", "coroutines", "aio", "uv")


def stage_params(names: list[str] | None = None, *, default: tuple[str, ...] | None = None) -> list:
    """One ``pytest.param`` per stage name (default: every stage, in reading order).

    A stage whose module does not import here carries a skip mark with
    ``Stage.unavailable()``'s message (tinyloop/stages.py).  With ``default``
    (stage names, e.g. ``ONE_PER_PART``), every other row is marked slow.
    """
    from tinyloop import stages

    params = []
    for name in names if names is not None else [stage.name for stage in stages.STAGES]:
        why = stages.get(name).unavailable()
        marks = [pytest.mark.skip(reason=f"{name}: {why}")] if why else []
        if default is not None and name not in default:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def asyncio_loop_params() -> list:
    """``stage_params`` of the stages whose loop is an asyncio loop (``aio``, ``uv``)."""
    from tinyloop.testing import asyncio_loop_stages

    return stage_params(asyncio_loop_stages())


def source_copy(dest: Path) -> Path:
    """Copy the checkout's tracked files (``git ls-files``) to ``dest``; return ``dest``.

    What a fresh clone has: no built extension (``*.so`` is ignored by git),
    no virtual environment, no caches.  Tests run a child Python in it with
    ``PYTHONPATH`` set to ``dest`` (an editable install's finder comes after
    the path, so the copy's ``tinyloop`` is the one imported), to see the
    package as it is without libuv (tests/test_uv_unbuilt.py) or with
    another build of the extension (tests/test_uv_builds.py).  Skips the
    test when this is not a git checkout.
    """
    root = Path(__file__).resolve().parent.parent
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                                check=True, timeout=30).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"needs a git checkout to copy the tracked files: {error}")
    for name in filter(None, listed.split("\0")):
        source = root / name
        if source.is_file():   # a path deleted in the work tree and not yet committed is skipped
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def child_env(tree: Path, **extra: str) -> dict[str, str]:
    """os.environ for a child Python that must import ``tinyloop`` from ``tree``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", **extra)
    return env
