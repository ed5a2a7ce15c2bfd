"""The book's stages, in reading order: the one table that maps a stage's name
(what ``python -m tinyloop serve NAME`` takes) to the module that serves it
and the chapter that explains it.  Chapter files are named here and nowhere
else in the code, so moving a chapter renames no module.

A stage module exposes ``serve(listener)``: it takes a bound, listening
socket and serves HTTP with :class:`tinyloop.http.HTTPConnection` until
interrupted (KeyboardInterrupt), closing every socket it opened.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from tinyloop._override import apply_override

__all__ = ["STAGES", "Stage", "get", "load"]


@dataclass(frozen=True)
class Stage:
    name: str
    module: str
    chapter: str
    summary: str
    # For a stage whose chapter builds an event loop: "module:callable" that
    # makes one (called with ``selector=`` and ``clock=``, as the fakes need).
    # It makes the stage a row of the behaviour suite (tests/behaviour/) and,
    # when the loop is an asyncio.AbstractEventLoop, of the conformance suite
    # (tests/conformance/).  None for servers that bring no loop of their own.
    loop: str | None = None
    # False for a loop that keeps its own clock and poller (Part IV's, on
    # libuv): it cannot take the fakes, so it has no row in the behaviour
    # suite, only in the conformance suite.
    fakes: bool = True

    def unavailable(self) -> str | None:
        """Why this stage cannot run here (its module does not import), or None.

        Part IV can be missing: its extension is built only where libuv
        and a C compiler are (setup.py), and the message says what to
        install.  Part VI's stages need io_uring: Linux, and a kernel and
        a sandbox that allow it; their modules' ``unavailable()`` says which
        is missing.
        """
        try:
            module = importlib.import_module(self.module)
        except ImportError as error:
            return str(error)
        # A module may know more (Part VI: is io_uring allowed on this machine?).
        check = getattr(module, "unavailable", None)
        return check() if check is not None else None


STAGES: tuple[Stage, ...] = (
    Stage("blocking", "tinyloop.baseline.blocking", "baselines",
          "one client at a time: accept, serve it until it leaves, repeat"),
    Stage("threaded", "tinyloop.baseline.threaded", "baselines",
          "a thread per connection, blocking calls in each"),
    Stage("select", "tinyloop.raw.select_server", "readiness",
          "non-blocking sockets and select(2); refuses descriptors >= FD_SETSIZE"),
    Stage("poll", "tinyloop.raw.poll_server", "readiness",
          "poll(2): no FD_SETSIZE, still a scan of every descriptor per call"),
    Stage("epoll", "tinyloop.raw.epoll_server", "readiness",
          "epoll(7), level-triggered: the kernel keeps the interest list"),
    Stage("epoll-et", "tinyloop.raw.epoll_et_server", "readiness",
          "epoll(7), edge-triggered: drain every socket to EAGAIN"),
    Stage("kqueue", "tinyloop.raw.kqueue_server", "readiness",
          "kqueue(2) change lists; on Linux an emulation on epoll"),
    Stage("callbacks", "tinyloop.callbacks.server", "callbacks",
          "a selectors-based reactor: ready queue, timer heap, callbacks",
          loop="tinyloop.callbacks.loop:Loop"),
    Stage("generators", "tinyloop.generators.server", "generators",
          "a generator-stack scheduler: tasks yield traps, a trampoline runs them",
          loop="tinyloop.callbacks.loop:Loop"),
    Stage("yieldfrom", "tinyloop.generators.yieldfrom_server", "generators",
          "the same scheduler with `yield from` keeping the stack",
          loop="tinyloop.callbacks.loop:Loop"),
    Stage("coroutines", "tinyloop.coroutines.server", "coroutines",
          "async/await on our own Future and Task, with streams",
          loop="tinyloop.callbacks.loop:Loop"),
    Stage("aio", "tinyloop.aio.server", "asyncio",
          "an asyncio event loop on Part II's reactor: a Protocol on transports",
          loop="tinyloop.aio:new_event_loop"),
    Stage("aio-streams", "tinyloop.aio.streams_server", "asyncio",
          "the same server on asyncio's own streams, run on tinyloop.aio"),
    Stage("uv", "tinyloop.uv.server", "libuv",
          "Part III's loop with its hot paths in Cython on libuv: the same Protocol",
          loop="tinyloop.uv:new_event_loop", fakes=False),
    Stage("uv-streams", "tinyloop.uv.streams_server", "libuv",
          "asyncio's streams on tinyloop.uv"),
    Stage("uring", "tinyloop.raw.uring_server", "completion",
          "io_uring(7) through ctypes and mmap: hand the kernel the operation, reap its completion"),
    Stage("uring-multishot", "tinyloop.raw.uring_multishot_server", "completion",
          "io_uring with multishot accept and receive on a provided-buffer ring"),
    Stage("ring", "tinyloop.ring.server", "completion",
          "Part III's loop as a proactor on io_uring: transports of outstanding receives and sends",
          loop="tinyloop.ring:new_event_loop", fakes=False),
)

_BY_NAME = {stage.name: stage for stage in STAGES}


def get(name: str) -> Stage:
    """The stage called ``name``; raises ``KeyError`` listing the known names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; known stages: {', '.join(_BY_NAME)}") from None


def load(name: str) -> ModuleType:
    """Import the module that serves stage ``name``.

    Any module replaced through ``TINYLOOP_OVERRIDE`` (the exercise checker
    uses it to run a student's file) is put in place first.
    """
    stage = get(name)
    apply_override()
    return importlib.import_module(stage.module)
