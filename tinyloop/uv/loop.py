"""The Python face of Part IV: tinyloop.uv.Loop is Part III's loop with a C
base class in front of it.

Rules this file keeps:
  * Subclass, override: Loop inherits every method of Part III's
    SelectorEventLoop, and the C base (tinyloop/uv/_loop.pyx) comes first
    in the method resolution order, so each method it defines replaces
    Part III's and every other method is Part III's, unchanged.
  * Only what cannot be said in C is here: the class itself, the two
    factories that pick libuv's way (uv_tcp for TCP, uv_spawn for a
    subprocess), and the same three ways in as Part III (new_event_loop,
    run, EventLoopPolicy).
  * The extension is optional (setup.py).  Without it, importing this
    module raises an ImportError that says what to install.

Discussion: why a mixin and not a rewrite?  uvloop rewrote asyncio's
loop in Cython, all of it.  Here the point is to find what is worth
moving, so we move only what the profile of Part III's loop points at
(chapters/libuv.md): the ready queue and handles, the timer heap,
readiness, the TCP transport and the accept of a TCP connection; and
starting a subprocess, which Part III does with Popen in the loop's
thread.  Sockets' sock_* coroutines, Unix sockets, pipes, the subprocess
transport, signals, TLS, the executor and the server object stay Part
III's Python, running on the C core: they are not on the path of a
request.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from tinyloop.aio import base_events
from tinyloop.aio import events as aio_events
from tinyloop.aio import selector_events
from tinyloop.aio import unix_events

try:
    from tinyloop.uv import _loop
except ImportError as exc:  # the extension was not built
    raise ImportError(
        "tinyloop.uv is a C extension on libuv, and it is not built in this installation "
        f"({exc}). Install libuv's headers and a C compiler (Debian/Ubuntu: apt-get install "
        "libuv1-dev gcc; Fedora: dnf install libuv-devel gcc; macOS: brew install libuv), "
        "then reinstall tinyloop (pip install -e .); the README's commands do both."
    ) from exc

__all__ = ["EventLoopPolicy", "Loop", "new_event_loop", "run"]

T = TypeVar("T")

DEBUG_BUILD: bool = bool(_loop.DEBUG_BUILD)
"""True when the extension is the debug build (setup.py, TINYLOOP_UV_DEBUG=1)."""


class _NoSelector:
    """What Part II's __init__ gets instead of a selector: libuv polls for us.

    Part II's loop opens and closes the selector it is given and calls it
    nowhere else once readiness is overridden (tinyloop/uv/_loop.pyx), so an
    object that can only be closed is enough, and no epoll descriptor is
    opened for nothing.
    """

    def close(self) -> None:
        pass


class Server(base_events.Server):
    """Part III's Server, with its clients kept in C (tinyloop/uv/tcp.pyx's ClientSet).

    A transport calls ``server._attach(transport)`` when made and
    ``_detach(transport)`` when lost, once per connection: here both are the
    C set's own methods, so neither runs a Python frame; the set calls
    :meth:`_last_client_gone` when it empties.  The set is weak, as Part
    III's WeakSet: a transport nobody holds is collected.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._clients = _loop.ClientSet(self._last_client_gone)  # type: ignore[assignment]
        self._attach = self._clients.add  # type: ignore[method-assign]
        self._detach = self._clients.discard  # type: ignore[method-assign]

    def _last_client_gone(self) -> None:
        if self._sockets is None:  # closed, and now nobody is left: wait_closed() returns
            self._wakeup()


class Loop(_loop.UVLoop, unix_events.SelectorEventLoop):
    """An ``asyncio.AbstractEventLoop`` on libuv (Linux, macOS, the BSDs).

    ``debug=None`` reads the environment as Part III does.  Unlike Part III
    it takes no selector and no clock: libuv polls (epoll, kqueue) and keeps
    the time.  Source of the contract: the asyncio docs, "Event Loop".
    """

    def __init__(self, *, debug: bool | None = None) -> None:
        super().__init__(_NoSelector(), time.monotonic, debug=debug)

    def _make_socket_transport(self, sock: socket.socket, protocol: asyncio.BaseProtocol,
                               waiter: asyncio.Future | None = None, *,
                               extra: dict[str, Any] | None = None,
                               server: Any = None) -> asyncio.Transport:
        """A uv_tcp transport for TCP; Part III's uv_poll transport for anything else."""
        if selector_events._socket_kind(sock)[0] in selector_events._INET:  # ints: no enum made per connection
            return _loop.TCPTransport(self, sock, protocol, waiter, extra, server)
        return super()._make_socket_transport(sock, protocol, waiter, extra=extra, server=server)

    def _make_server(self, *args: Any) -> Server:
        """create_server's Server: Part III's, with its clients kept in C."""
        return Server(self, *args)

    def _make_subprocess(self, protocol: asyncio.SubprocessProtocol, args: Any, shell: bool,
                         stdin: Any, stdout: Any, stderr: Any, bufsize: int, *,
                         waiter: asyncio.Future, extra: dict[str, Any] | None,
                         **kwargs: Any) -> asyncio.SubprocessTransport:
        """A child started by uv_spawn; Part III's Popen for what uv_spawn cannot do.

        uv_spawn runs no Python code in the child, so ``preexec_fn``,
        ``user``, ``group``, ``umask`` and the other Popen keywords outside
        ``_loop.SPAWN_KEYWORDS``, and ``restore_signals=False`` (libuv resets
        every signal), take Part III's path (tinyloop/uv/spawn.pyx).
        """
        if kwargs.keys() <= _loop.SPAWN_KEYWORDS and kwargs.get("restore_signals", True):
            return _loop.UVSubprocessTransport(self, protocol, args, shell, stdin, stdout, stderr,
                                               bufsize, waiter=waiter, extra=extra, **kwargs)
        return super()._make_subprocess(protocol, args, shell, stdin, stdout, stderr, bufsize,
                                        waiter=waiter, extra=extra, **kwargs)


def new_event_loop(**kwargs: Any) -> Loop:
    """A new, not running, :class:`Loop`; keyword arguments go to its constructor.

    Pass it where asyncio takes a loop factory:
    ``asyncio.Runner(loop_factory=tinyloop.uv.new_event_loop)``.
    """
    return Loop(**kwargs)


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """Run ``main`` on a new tinyloop.uv loop and return its result, as ``asyncio.run``.

    Raises what ``main`` raises; KeyboardInterrupt after Ctrl-C has
    cancelled it; RuntimeError if a loop is already running in this thread.
    """
    with asyncio.Runner(loop_factory=new_event_loop, debug=debug) as runner:
        return runner.run(main)


class EventLoopPolicy(aio_events.EventLoopPolicy):
    """asyncio's default policy, making tinyloop.uv loops (deprecated in 3.14, as all policies)."""

    def _loop_factory(self) -> asyncio.AbstractEventLoop:
        return new_event_loop()
