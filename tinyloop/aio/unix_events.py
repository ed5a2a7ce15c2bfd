"""The loop as programs get it: the selector loop plus what only Unix has.
It reads beside CPython's Lib/asyncio/unix_events.py, whose
_UnixSelectorEventLoop is our SelectorEventLoop.

Rules this file keeps:
  * This is the last class in the chain, and the one users make:

        tinyloop.callbacks.loop.Loop            Part II: the reactor
          -> base_events.BaseEventLoop          asyncio's contract, no I/O
            -> selector_events.BaseSelectorEventLoop   sockets, transports
              -> unix_events.SelectorEventLoop         signals, pipes,
                                                       subprocesses, Unix sockets

  * ``Loop``, ``new_event_loop`` and ``EventLoopPolicy`` are the public
    names (tinyloop.aio exports them), as uvloop's are.
  * A signal handler runs as an ordinary callback, between two others,
    never inside one (see "Signals").
  * No SIGCHLD handler, ever.  A child's exit is learnt from a pidfd the
    selector watches, or from a thread blocked in waitpid(2) for that one
    child, so subprocesses work from a loop in any thread, and no loop
    reaps another loop's children (see "Child watchers").
  * A pipe transport takes only a pipe, a socket or a character device
    (ValueError otherwise), and makes it non-blocking: a regular file is
    always "ready", so the selector cannot pace it.

Where this differs from CPython, and why:
  * subprocess_exec/subprocess_shell and connect_read_pipe/connect_write_pipe
    live here, not in base_events.py: only this loop can make their
    transports.
  * Removing the last signal handler puts back the wakeup fd that was set
    before the first (asyncio writes -1; uvloop restores, as we do).
  * A write pipe over a socket pair drops what the far end sends it and
    closes only at its EOF or error; asyncio closes on any readability.
  * ``cleanup_socket`` (3.13's create_unix_server argument) is accepted on
    every Python we run on; its default is the running Python's behaviour
    (True from 3.13; before, asyncio left the socket file behind).
  * One child watcher per child, chosen here (asyncio 3.11 asks its
    policy for a process-wide one).  The exit is reported in the iteration
    the pidfd turns readable; asyncio waits one more.  A closed loop's
    watchers let go of their transports, so one nobody closed is collected
    and kills its child; asyncio's watcher keeps it alive until the exit.
  * The pipe transports report a write error other than EPIPE, ECONNRESET
    or EIO to the exception handler; asyncio's write pipe logs every
    OSError only in debug mode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import functools
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tinyloop.aio import base_events, base_subprocess, selector_events
from tinyloop.aio.events import Handle
from tinyloop.aio.futures import _set_result_unless_cancelled
from tinyloop.aio.transports import FlowControlMixin, source_traceback, unclosed_message
from tinyloop.callbacks.loop import Reactor

__all__ = ["AioBase", "EventLoopPolicy", "Loop", "SelectorEventLoop", "new_event_loop"]

logger = logging.getLogger("asyncio")

# After this many writes to a closed pipe, write() says so in the log.
_LOG_THRESHOLD_FOR_CONNLOST_WRITES = 5


def _note_signal(signum: int, frame: Any) -> None:
    """The Python-level handler we install: it does nothing (see "Signals")."""


@runtime_checkable
class AioBase(Reactor, Protocol):
    """What Part III's loop offers Part IV's C base, beyond Part II's :class:`Reactor`.

    tinyloop.uv.Loop is ``UVLoop`` (C) in front of Part III's loop: the C
    methods call these by name, and ``_task_factory`` is a ``cdef public``
    field of UVLoop that Part III's ``__init__`` and ``set_task_factory``
    fill.  The type checker holds :class:`SelectorEventLoop` to this
    (tests/test_contracts.py), and a test holds the C base's public fields
    to it.
    """

    _task_factory: Callable[..., asyncio.Future] | None
    _default_executor: concurrent.futures.ThreadPoolExecutor | None  # the fork child drops it
    _transports: Any  # fd -> transport: a socket in use by a transport is refused to sock_*
    _accept_backoff: dict[int, Any]  # listeners resting after EMFILE: the C listener ends a rest

    def _ensure_fd_no_transport(self, fd: Any) -> None: ...
    def _start_serving(self, protocol_factory: Callable[[], asyncio.BaseProtocol], sock: Any,
                       sslcontext: Any, server: Any, backlog: int = 100,
                       ssl_handshake_timeout: float | None = None,
                       ssl_shutdown_timeout: float | None = None) -> None: ...
    def _accept_back_off(self, exc: OSError, *serving: Any) -> None: ...

    def is_running(self) -> bool: ...
    def call_exception_handler(self, context: dict[str, Any]) -> None: ...
    def create_task(self, coro: Any, *, name: str | None = None, context: Any = None,
                    **kwargs: Any) -> asyncio.Future: ...
    def create_future(self) -> asyncio.Future: ...
    def _make_subprocess(self, protocol: asyncio.SubprocessProtocol, args: Any, shell: bool,
                         stdin: Any, stdout: Any, stderr: Any, bufsize: int, *,
                         waiter: asyncio.Future, extra: dict[str, Any] | None,
                         **kwargs: Any) -> Any: ...


class SelectorEventLoop(selector_events.BaseSelectorEventLoop):
    """tinyloop's asyncio event loop for Unix (Linux, macOS, the BSDs).

    ``selector`` (a :class:`selectors.BaseSelector`, default the best the
    platform has) and ``clock`` (seconds, monotonic) are injected as in
    Part II; ``debug=None`` reads the environment.  Beyond the selector
    loop it has signal handlers, Unix sockets, pipe transports and
    subprocesses, each section below.
    """

    def __init__(self, selector: Any = None, clock: Callable[[], float] = time.monotonic, *,
                 debug: bool | None = None) -> None:
        self._signal_handlers: dict[int, Handle] = {}  # signal number -> its handle
        self._wakeup_fd = -1            # the wakeup fd we set (our self-pipe's write end), or -1
        self._previous_wakeup_fd = -1   # the one it replaced, put back when we are done
        self._child_watchers: set[Any] = set()  # children not yet reported (see Child watchers)
        self._unix_socket_files: dict[int, tuple[str, int, int]] = {}  # see _stop_serving
        super().__init__(selector, clock, debug=debug)

    def close(self) -> None:
        """Remove every signal handler, stop watching children, then close as Part II does.

        Raises RuntimeError if the loop is running.  Children still running
        are not killed: their transports do that when closed.
        """
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if not self._closed:
            # Before the self-pipe closes: the wakeup fd points into it.
            if self._signal_handlers and sys.is_finalizing():
                # signal.signal() may fail this late; leave the process's handlers be.
                warnings.warn(f"Closing the loop {self!r} at interpreter shutdown: its signal "
                              "handlers are left in place", ResourceWarning, source=self)
                self._signal_handlers.clear()
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
            for watcher in list(self._child_watchers):
                watcher.close()
        super().close()

    # -- Signals -------------------------------------------------------------------
    #
    # Discussion: a signal may arrive between any two bytecodes of the main
    # thread, in the middle of a callback, with the loop's state half
    # changed; so its handler must do nothing but note that it came.  Python
    # already splits the work in two.  Its C-level handler only sets a flag
    # and, if signal.set_wakeup_fd() named a descriptor, writes the signal's
    # number into it as one byte (write(2) is async-signal-safe, signal(7)).
    # We name the write end of Part II's self-pipe.  A signal then wakes
    # select() exactly as call_soon_threadsafe does, and _read_from_self finds
    # its number among the wake-up bytes (call_soon_threadsafe writes 0, which
    # no signal has) and puts its handler on the ready queue.  The Python-level
    # handler we install, _note_signal, does nothing: it is there so that the
    # signal is caught (not fatal, not ignored) and the byte gets written.
    #
    # Only the main thread may set the wakeup fd or a handler (Python's rule,
    # signal module docs), so only a loop there can have signal handlers.

    def add_signal_handler(self, sig: int, callback: Callable[..., object], *args: Any) -> None:
        """Call ``callback(*args)`` on the loop each time signal ``sig`` arrives.

        Replaces any handler this loop had for ``sig``.  Raises TypeError for
        a coroutine function, ValueError for a number that is no signal,
        RuntimeError outside the main thread, for a signal that cannot be
        caught (SIGKILL, SIGSTOP), or if the loop is closed.  Sources: the
        asyncio docs, "Unix signals"; signal(7); PEP 475 (the restarted
        system calls).
        """
        self._check_callback(callback, "add_signal_handler")
        self._check_signal(sig)
        try:
            # First: it raises ValueError outside the main thread.
            previous = signal.set_wakeup_fd(self._csock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from None
        if previous != self._csock.fileno():
            self._previous_wakeup_fd = previous
        self._wakeup_fd = self._csock.fileno()
        self._signal_handlers[sig] = Handle(callback, args, self)
        try:
            signal.signal(sig, _note_signal)
            # SA_RESTART: a blocking call the signal interrupts is resumed
            # rather than failing with EINTR (signal(7), "Interruption of
            # system calls"); Python retries the rest itself (PEP 475).
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                self._restore_wakeup_fd()
            if exc.errno == errno.EINVAL:  # sigaction(2): SIGKILL and SIGSTOP
                raise RuntimeError(f"sig {sig} cannot be caught") from None
            raise

    def remove_signal_handler(self, sig: int) -> bool:
        """Stop handling ``sig``; True if this loop had a handler for it.

        The signal's disposition goes back to the default (for SIGINT,
        Python's, which raises KeyboardInterrupt).  Raises ValueError for a
        number that is no signal, and outside the main thread (signal.signal's
        own; the handler then stays).
        """
        self._check_signal(sig)
        if sig not in self._signal_handlers:
            return False
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        signal.signal(sig, default)
        del self._signal_handlers[sig]
        if not self._signal_handlers:
            self._restore_wakeup_fd()
        return True

    def _check_signal(self, sig: Any) -> None:
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in signal.valid_signals():
            raise ValueError(f"invalid signal number {sig}")

    def _restore_wakeup_fd(self) -> None:
        """Give the wakeup fd back to whoever had it before us, if it is still ours.

        Discussion: putting back the previous descriptor is right when its
        owner outlives us (a program that set its own, then ran a loop).  If
        that owner was another loop, since closed, set_wakeup_fd refuses the
        dead descriptor and we set none; one that the kernel has meanwhile
        given to a new non-blocking socket would get the signal bytes.  Two
        loops with signal handlers, interleaved in the main thread, are
        asking for that; asyncio avoids it by always setting -1.
        """
        ours, self._wakeup_fd = self._wakeup_fd, -1
        previous, self._previous_wakeup_fd = self._previous_wakeup_fd, -1
        try:
            current = signal.set_wakeup_fd(previous)
            if current != ours:  # someone took it after us: theirs stays
                signal.set_wakeup_fd(current)
        except (ValueError, OSError) as exc:  # the previous one is gone: set none
            logger.info("set_wakeup_fd(%d) failed: %s", previous, exc)
            signal.set_wakeup_fd(-1)

    def _read_from_self(self) -> None:
        """Drain the self-pipe (Part II's job) and queue the handler of each signal byte."""
        try:
            while data := self._ssock.recv(4096):
                for signum in data:
                    # None for 0 (a wake-up) and for a signal nobody handles here.
                    handle = self._signal_handlers.get(signum)
                    if handle is not None:
                        self._ready.append(handle)
        except (BlockingIOError, InterruptedError):
            pass

    # -- Unix sockets ----------------------------------------------------------------

    async def create_unix_connection(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], path: Any = None, *,
            ssl: Any = None, sock: socket.socket | None = None,
            server_hostname: str | None = None, ssl_handshake_timeout: float | None = None,
            ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """Connect to the Unix socket ``path`` (or use ``sock``); return (transport, protocol).

        ``path`` is a str, bytes or path-like; one starting with a NUL byte
        names Linux's abstract namespace (unix(7)).  With ``ssl``,
        ``server_hostname`` is required (there is no host to default to).
        Raises ValueError for contradictory arguments, OSError
        (FileNotFoundError, ConnectionRefusedError) when nothing listens
        there.  Source: the asyncio docs, "Opening Unix socket connections".
        """
        if ssl:
            if server_hostname is None:
                raise ValueError("you have to pass server_hostname when using ssl")
        else:
            if server_hostname is not None:
                raise ValueError("server_hostname is only meaningful with ssl")
            if ssl_handshake_timeout is not None:
                raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
            if ssl_shutdown_timeout is not None:
                raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                await self.sock_connect(sock, os.fspath(path))
            except BaseException:
                sock.close()
                raise
        elif sock is None:
            raise ValueError("no path and sock were specified")
        else:
            _check_unix_stream_socket(sock)
        return await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout)

    async def create_unix_server(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], path: Any = None, *,
            sock: socket.socket | None = None, backlog: int = 100, ssl: Any = None,
            ssl_handshake_timeout: float | None = None, ssl_shutdown_timeout: float | None = None,
            start_serving: bool = True, cleanup_socket: bool | None = None,
    ) -> base_events.Server:
        """Listen on the Unix socket ``path`` (or on ``sock``); return a ``base_events.Server``.

        A socket file left at ``path`` by a server that died is removed
        first; anything else there makes bind fail (OSError EADDRINUSE).
        With ``cleanup_socket`` the file is removed again when the server
        closes, if it is still the one we bound (None, the default: as the
        running Python's asyncio, which removes it from 3.13 on and leaves
        it before).  ``backlog`` is listen(2)'s.
        Raises TypeError for ``ssl=True`` (a server needs a context),
        ValueError for contradictory arguments.  Sources: the asyncio docs,
        "Creating network servers"; unix(7).
        """
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            if not _is_abstract(path):
                _remove_stale_socket(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(path)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
                raise
            except BaseException:
                sock.close()
                raise
        elif sock is None:
            raise ValueError("path was not specified, and no sock specified")
        else:
            _check_unix_stream_socket(sock)
        if cleanup_socket is None:
            cleanup_socket = sys.version_info >= (3, 13)
        if cleanup_socket:
            self._remember_socket_file(sock)
        sock.setblocking(False)
        server = base_events.Server(self, [sock], protocol_factory, ssl, backlog,
                                    ssl_handshake_timeout, ssl_shutdown_timeout)
        if start_serving:
            server._start_serving()
            await asyncio.sleep(0)  # let the loop register the listener
        return server

    # Discussion: a Unix socket's file outlives the socket: close(2) does not
    # unlink(2) it (unix(7)).  To remove it when the server closes we note its
    # identity (device, inode) at bind time, and Server.close() comes through
    # _stop_serving for each listener.  We unlink only a file that is still
    # the one we bound: another server may have taken the path since.

    def _remember_socket_file(self, sock: socket.socket) -> None:
        path = sock.getsockname()
        if not path or _is_abstract(path):
            return  # unbound, or abstract: no file
        try:
            info = os.stat(path)
        except OSError:
            return
        self._unix_socket_files[sock.fileno()] = (path, info.st_dev, info.st_ino)

    def _stop_serving(self, sock: socket.socket) -> None:
        remembered = self._unix_socket_files.pop(sock.fileno(), None)
        super()._stop_serving(sock)
        if remembered is None:
            return
        path, device, inode = remembered
        try:
            info = os.stat(path)
            if (info.st_dev, info.st_ino) == (device, inode):
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.error("Unable to clean up listening UNIX socket %r: %r", path, exc)

    async def _datagram_socket(self, local_addr: Any, remote_addr: Any, family: int, proto: int,
                               flags: int, reuse_port: bool | None,
                               allow_broadcast: bool | None) -> tuple[socket.socket, Any]:
        # A UNIX datagram endpoint at a path a dead one left its file at:
        # the file goes first, as for create_unix_server (asyncio does the
        # same in create_datagram_endpoint).
        if family == socket.AF_UNIX and isinstance(local_addr, (str, bytes)) and local_addr \
                and not _is_abstract(local_addr):
            _remove_stale_socket(local_addr)
        return await super()._datagram_socket(local_addr, remote_addr, family, proto, flags,
                                               reuse_port, allow_broadcast)

    # -- Pipes ----------------------------------------------------------------------------

    async def connect_read_pipe(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                                pipe: Any) -> tuple[asyncio.ReadTransport, asyncio.BaseProtocol]:
        """Read ``pipe`` (a file object) into a protocol; return (transport, protocol).

        The protocol gets data_received(bytes), then at the writer's close
        eof_received() and connection_lost(None).  The transport owns
        ``pipe`` and closes it.  Raises ValueError unless ``pipe`` is a pipe,
        socket or character device.  Source: the asyncio docs, "Working with
        pipes"; pipe(7).
        """
        return await self._connect_pipe(_UnixReadPipeTransport, protocol_factory, pipe)

    async def connect_write_pipe(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                                 pipe: Any) -> tuple[asyncio.WriteTransport, asyncio.BaseProtocol]:
        """Write to ``pipe`` through a buffering transport; return (transport, protocol).

        When the reader closes its end the protocol gets connection_lost:
        BrokenPipeError if bytes were still buffered, else None.  Raises
        ValueError unless ``pipe`` is a pipe, socket or character device.
        Source: the asyncio docs, "Working with pipes"; pipe(7).
        """
        return await self._connect_pipe(_UnixWritePipeTransport, protocol_factory, pipe)

    async def _connect_pipe(self, transport_class: type, protocol_factory: Callable[[], Any],
                            pipe: Any) -> tuple[Any, Any]:
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = transport_class(self, pipe, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    def _make_read_pipe_transport(self, pipe: Any, protocol: asyncio.BaseProtocol,
                                  waiter: asyncio.Future | None = None,
                                  extra: dict[str, Any] | None = None) -> _UnixReadPipeTransport:
        return _UnixReadPipeTransport(self, pipe, protocol, waiter, extra)

    def _make_write_pipe_transport(self, pipe: Any, protocol: asyncio.BaseProtocol,
                                   waiter: asyncio.Future | None = None,
                                   extra: dict[str, Any] | None = None) -> _UnixWritePipeTransport:
        return _UnixWritePipeTransport(self, pipe, protocol, waiter, extra)

    # -- Subprocesses ----------------------------------------------------------------------

    async def subprocess_exec(self, protocol_factory: Callable[[], asyncio.SubprocessProtocol],
                              program: Any, *args: Any, stdin: Any = subprocess.PIPE,
                              stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
                              universal_newlines: bool = False, shell: bool = False,
                              bufsize: int = 0, encoding: str | None = None,
                              errors: str | None = None, text: bool | None = None,
                              **kwargs: Any) -> tuple[asyncio.SubprocessTransport, Any]:
        """Run ``program`` with ``args`` (no shell); return (transport, protocol) once connected.

        ``stdin``/``stdout``/``stderr`` are as :class:`subprocess.Popen`'s
        (PIPE gives a pipe transport, see ``get_pipe_transport``); other
        keywords (cwd, env, ...) go to Popen.  The bytes are bytes: the
        text-mode arguments must keep their defaults (ValueError).  Raises
        what Popen raises (FileNotFoundError for a missing program).
        ``asyncio.create_subprocess_exec`` calls this.  Source: the asyncio
        docs, "Running Subprocesses".
        """
        self._check_subprocess_args(universal_newlines, bufsize, text, encoding, errors)
        if shell:
            raise ValueError("shell must be False")
        protocol = protocol_factory()
        transport = await self._make_subprocess_transport(
            protocol, (program, *args), False, stdin, stdout, stderr, bufsize, **kwargs)
        return transport, protocol

    async def subprocess_shell(self, protocol_factory: Callable[[], asyncio.SubprocessProtocol],
                               cmd: str | bytes, *, stdin: Any = subprocess.PIPE,
                               stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
                               universal_newlines: bool = False, shell: bool = True,
                               bufsize: int = 0, encoding: str | None = None,
                               errors: str | None = None, text: bool | None = None,
                               **kwargs: Any) -> tuple[asyncio.SubprocessTransport, Any]:
        """Run ``cmd`` (str or bytes) with /bin/sh; otherwise as :meth:`subprocess_exec`.

        Raises ValueError for a ``cmd`` that is not a string or for
        ``shell=False``.  ``asyncio.create_subprocess_shell`` calls this.
        """
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        self._check_subprocess_args(universal_newlines, bufsize, text, encoding, errors)
        if not shell:
            raise ValueError("shell must be True")
        protocol = protocol_factory()
        transport = await self._make_subprocess_transport(
            protocol, cmd, True, stdin, stdout, stderr, bufsize, **kwargs)
        return transport, protocol

    @staticmethod
    def _check_subprocess_args(universal_newlines: bool, bufsize: int, text: bool | None,
                               encoding: str | None, errors: str | None) -> None:
        # A pipe transport moves bytes; decoding is the protocol's business.
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if bufsize != 0:
            raise ValueError("bufsize must be 0")
        if text:
            raise ValueError("text must be False")
        if encoding is not None:
            raise ValueError("encoding must be None")
        if errors is not None:
            raise ValueError("errors must be None")

    async def _make_subprocess_transport(self, protocol: asyncio.SubprocessProtocol, args: Any,
                                         shell: bool, stdin: Any, stdout: Any, stderr: Any,
                                         bufsize: int, extra: dict[str, Any] | None = None,
                                         **kwargs: Any) -> base_subprocess.BaseSubprocessTransport:
        waiter = self.create_future()
        transport = self._make_subprocess(protocol, args, shell, stdin, stdout, stderr, bufsize,
                                          waiter=waiter, extra=extra, **kwargs)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            # Cancelled before connection_made: kill the child and wait for it,
            # so no zombie is left behind.
            transport.close()
            await transport._wait()
            raise
        return transport

    def _make_subprocess(self, protocol: asyncio.SubprocessProtocol, args: Any, shell: bool,
                         stdin: Any, stdout: Any, stderr: Any, bufsize: int, *,
                         waiter: asyncio.Future, extra: dict[str, Any] | None,
                         **kwargs: Any) -> base_subprocess.BaseSubprocessTransport:
        """Start the child and return its transport: here with Popen and a child watcher.

        The one step of starting a subprocess that a later loop does its
        own way (tinyloop.uv spawns with libuv).  Raises what Popen raises.
        """
        return _UnixSubprocessTransport(self, protocol, args, shell, stdin, stdout, stderr,
                                        bufsize, waiter=waiter, extra=extra, **kwargs)


Loop = SelectorEventLoop


def new_event_loop(**kwargs: Any) -> Loop:
    """A new, not running, :class:`Loop`; keyword arguments go to its constructor.

    Pass it where asyncio takes a loop factory:
    ``asyncio.Runner(loop_factory=tinyloop.aio.new_event_loop)``, or
    ``asyncio.run(main(), loop_factory=...)`` on 3.12+.
    """
    return Loop(**kwargs)


# -- The policy ------------------------------------------------------------------
#
# Discussion: asyncio asks its *policy* for a new loop (asyncio.new_event_loop,
# asyncio.run on 3.11, get_event_loop in the main thread).  The default
# policy's only loop-specific line is ``_loop_factory``; uvloop's policy
# overrides exactly that, and so does ours.  It lives here, below the loop it
# makes, as CPython's DefaultEventLoopPolicy lives in its unix_events.py.
# Policies are deprecated from Python 3.14 in favour of
# ``asyncio.run(..., loop_factory=...)`` and
# ``asyncio.Runner(loop_factory=...)``, which take new_event_loop directly.

_PolicyBase: Any = getattr(asyncio.events, "BaseDefaultEventLoopPolicy", None) or \
    getattr(asyncio.events, "_BaseDefaultEventLoopPolicy")


class EventLoopPolicy(_PolicyBase):
    """An asyncio event loop policy whose loops are tinyloop's.

    Install it with ``asyncio.set_event_loop_policy(tinyloop.aio.EventLoopPolicy())``;
    from then on ``asyncio.new_event_loop()`` and ``asyncio.run()`` make
    :class:`tinyloop.aio.Loop` instances.  Source: the asyncio docs,
    "Policies".
    """

    def _loop_factory(self) -> asyncio.AbstractEventLoop:
        return Loop()


# -- Unix socket helpers ------------------------------------------------------------------

def _is_abstract(path: str | bytes) -> bool:
    """Linux's abstract namespace: a name starting with a NUL byte has no file (unix(7))."""
    return path[:1] in ("\0", b"\0")


def _remove_stale_socket(path: str | bytes) -> None:
    """Remove a socket file a dead server left at ``path``; leave anything else alone."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a directory we may create in but not inspect
        logger.error("Unable to check or remove stale UNIX socket %r: %r", path, exc)


def _check_unix_stream_socket(sock: socket.socket) -> None:
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")


# -- Pipe transports ------------------------------------------------------------------------
#
# Discussion: a pipe is read and written with read(2) and write(2) on its
# descriptor, not recv/send, and has no address; otherwise the transports
# are the socket transports' little siblings.  Two facts of pipe(7) shape
# them.  A read of 0 bytes means every write end is closed: EOF.  And a
# write end cannot learn from a write alone that the reader has gone until
# it writes (EPIPE); but epoll reports EPOLLERR on it at once, which the
# selectors module turns into "readable" (a write end has nothing else to
# read).  So a write pipe watches its own descriptor for reading.

class _UnixPipeTransport:
    """What both pipe transports share: the checks, the descriptor, closing, errors.

    State (all of it):

        _pipe       the file object (None once closed)
        _fileno     its descriptor, non-blocking
        _protocol   the protocol (None once connection_lost ran)
        _closing    close() (or EOF, or an error) began the end
        _lost       connection_lost is scheduled
    """

    _loop: Any
    _extra: dict[str, Any]

    def _setup(self, pipe: Any, protocol: asyncio.BaseProtocol) -> int:
        """Check ``pipe``'s kind (ValueError), make it non-blocking; return its st_mode."""
        fileno = pipe.fileno()
        mode = os.fstat(fileno).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            raise ValueError("Pipe transport is only for pipes, sockets and character devices")
        os.set_blocking(fileno, False)
        self._source_traceback = source_traceback(self._loop)
        self._extra["pipe"] = pipe
        self._pipe = pipe
        self._fileno = fileno
        self._protocol: Any = protocol
        self._closing = False
        self._lost = False
        return mode

    def _connected(self, waiter: asyncio.Future | None, *then: Callable[[], object]) -> None:
        self._loop.call_soon(self._protocol.connection_made, self)
        for callback in then:  # after connection_made, which may pause or close us
            self._loop.call_soon(callback)
        if waiter is not None:
            self._loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self) -> str:
        state = "closed" if self._pipe is None else "closing" if self._closing else "open"
        return f"<{type(self).__name__} fd={self._fileno} {state}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if getattr(self, "_pipe", None) is not None:
            _warn(unclosed_message(self), ResourceWarning, source=self)
            self._pipe.close()

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing

    def _fatal_error(self, exc: BaseException, message: str) -> None:
        # The other end going away is ordinary: EPIPE or ECONNRESET for a pipe
        # or socket, EIO for a pseudo-terminal (pty(7)).
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)) or (
                isinstance(exc, OSError) and exc.errno == errno.EIO):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler({"message": message, "exception": exc,
                                               "transport": self, "protocol": self._protocol})
        self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        """End now: stop watching, and schedule connection_lost(exc) once."""
        self._closing = True
        self._loop._remove_reader(self._fileno)
        if not self._lost:
            self._lost = True
            self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._pipe.close()
            self._pipe = None
            self._protocol = None


class _UnixReadPipeTransport(_UnixPipeTransport, asyncio.ReadTransport):
    """The read end of a pipe: data_received(bytes) per read, then EOF.

    At EOF the protocol gets eof_received() and connection_lost(None); a
    pipe cannot be half-open, so eof_received's answer is not asked for.
    """

    max_size = 256 * 1024  # bytes asked of one read(2)

    def __init__(self, loop: Any, pipe: Any, protocol: asyncio.BaseProtocol,
                 waiter: asyncio.Future | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(extra)
        self._loop = loop
        self._setup(pipe, protocol)
        self._paused = False
        self._connected(waiter, self._start_reading)

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        """Stop reading until :meth:`resume_reading`; the writer blocks once the pipe fills."""
        if self.is_reading():
            self._paused = True
            self._loop._remove_reader(self._fileno)

    def resume_reading(self) -> None:
        if self._paused and not self._closing:
            self._paused = False
            self._start_reading()

    def _start_reading(self) -> None:
        if self.is_reading():
            self._loop._add_reader(self._fileno, self._read_ready)

    def _read_ready(self) -> None:
        try:
            data = os.read(self._fileno, self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on pipe transport")
            return
        if data:
            self._protocol.data_received(data)
            return
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        self._loop.call_soon(self._protocol.eof_received)
        self._close(None)

    def close(self) -> None:
        """Stop reading and close the pipe; connection_lost(None) follows."""
        if not self._closing:
            self._close(None)


class _UnixWritePipeTransport(_UnixPipeTransport, FlowControlMixin, asyncio.Transport):
    """The write end of a pipe: write() at once, buffer what the pipe refuses.

    An ``asyncio.Transport``, as asyncio's is (its flow-control mixin is
    one), so it has the reading methods too, which raise
    NotImplementedError: a program that checks for them finds what it
    finds on asyncio.

    The buffer is flow-controlled (tinyloop/aio/transports.py): above the
    high-water mark the protocol hears pause_writing().  close() and
    write_eof() are the same thing for a pipe: flush, then close.
    """

    def __init__(self, loop: Any, pipe: Any, protocol: asyncio.BaseProtocol,
                 waiter: asyncio.Future | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(extra, loop)
        mode = self._setup(pipe, protocol)
        self._buffer = bytearray()
        self._dropped_writes = 0  # write() calls after the end began
        self._is_socket = stat.S_ISSOCK(mode)
        # A terminal's write end has no reader to lose: nothing to watch.
        watch = (self._watch_reader,) if stat.S_ISFIFO(mode) or self._is_socket else ()
        self._connected(waiter, *watch)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f" buffered={len(self._buffer)}>"

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def _watch_reader(self) -> None:
        if not self._closing:
            self._loop._add_reader(self._fileno, self._read_ready)

    def _read_ready(self) -> None:
        """Our write end is readable: for a pipe, the reader has closed (see above)."""
        if self._is_socket:
            try:
                # Discussion: a socket is readable when the far end writes,
                # too.  A write pipe has nobody to give those bytes to, so
                # they are dropped; only EOF or an error means "gone".
                if os.read(self._fileno, 64 * 1024):
                    return
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                pass
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        self._close(BrokenPipeError() if self._buffer else None)

    def write(self, data: Any) -> None:
        """Write ``data`` (bytes-like) now if the pipe takes it; buffer the rest.

        After close() or the reader's going, the bytes are dropped (logged
        after a few).  Raises TypeError for a non-bytes-like.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, "
                            f"not {type(data).__name__!r}")
        if not data:
            return
        if self._closing:
            if self._dropped_writes >= _LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("pipe closed by peer or os.write(pipe, data) raised exception.")
            self._dropped_writes += 1
            return
        if not self._buffer:
            try:
                written = os.write(self._fileno, data)
            except (BlockingIOError, InterruptedError):
                written = 0
            except OSError as exc:
                self._fatal_error(exc, "Fatal write error on pipe transport")
                return
            if written == len(data):
                return
            data = memoryview(data)[written:]
            self._loop._add_writer(self._fileno, self._write_ready)
        self._buffer += data
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        try:
            written = os.write(self._fileno, self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal write error on pipe transport")
            return
        del self._buffer[:written]
        if self._buffer:
            return
        self._loop._remove_writer(self._fileno)
        self._maybe_resume_protocol()  # the protocol may write again here
        if self._closing and not self._buffer:
            self._close(None)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """Close the pipe once the buffer is written: the reader then reads EOF."""
        if self._closing:
            return
        self._closing = True
        if not self._buffer:
            self._close(None)

    def close(self) -> None:
        """Flush what is buffered, then close; connection_lost(None) follows."""
        if self._pipe is not None:
            self.write_eof()

    def abort(self) -> None:
        """Close now, dropping the buffer; connection_lost(None) follows."""
        self._close(None)

    def _close(self, exc: BaseException | None) -> None:
        if self._buffer:
            self._buffer.clear()
            self._loop._remove_writer(self._fileno)
        super()._close(exc)


# -- Child watchers ------------------------------------------------------------------------
#
# Discussion: when a child exits, the kernel keeps it as a zombie until its
# parent collects the status with waitpid(2); asyncio learns of the exit by
# doing that.  The classic way to notice the moment is SIGCHLD, but a signal
# goes to the process, not to a loop: a SIGCHLD handler would have to reap
# for every loop in every thread, and only the main thread may set one.  So
# we watch one child at a time, in one of two ways with the same shape:
#
#     pidfd (Linux 5.3+)   pidfd_open(2) gives a descriptor that turns
#                          readable when the child exits; the loop's selector
#                          watches it like a socket.  No thread, no signal,
#                          and pidfd_send_signal(2) cannot hit a recycled pid.
#     thread (elsewhere)   a thread blocks in waitpid(2) for this child and
#                          reports with call_soon_threadsafe (asyncio's
#                          ThreadedChildWatcher).
#
# Each is made for one child, reports ``callback(returncode)`` on the loop's
# thread, signals the child with ``send_signal``, and is let go with
# ``close``.  The loop closes the watchers it still has when it closes: they
# drop the callback, so a transport nobody closed can be collected, and its
# __del__ kills the child.

def _exit_code(status: int) -> int:
    """waitpid(2)'s status as an exit code: the status, or minus the killing signal."""
    try:
        return os.waitstatus_to_exitcode(status)
    except ValueError:  # stopped, say: not an exit we understand; report it raw
        return status


def _reap(pid: int, options: int) -> int | None:
    """Collect ``pid``'s exit status; its exit code, or None if it has not exited (WNOHANG)."""
    try:
        reaped, status = os.waitpid(pid, options)
    except ChildProcessError:
        # Someone else reaped it (a SIGCHLD handler set to SIG_IGN, a stray
        # os.wait()): the status is lost.  asyncio reports 255 too.
        logger.warning("child process pid %d exit status already read: will report "
                       "returncode 255", pid)
        return 255
    return None if reaped == 0 else _exit_code(status)


@functools.cache
def _can_use_pidfd() -> bool:
    """Whether this kernel (and any seccomp filter) allows pidfd_open and pidfd_send_signal."""
    if not hasattr(os, "pidfd_open") or not hasattr(signal, "pidfd_send_signal"):
        return False
    try:
        pidfd = os.pidfd_open(os.getpid())
    except OSError:  # ENOSYS before Linux 5.3, EPERM under a sandbox
        return False
    try:
        signal.pidfd_send_signal(pidfd, 0)  # signal 0: the checks alone (kill(2))
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def _watch_child(loop: SelectorEventLoop, pid: int, callback: Callable[[int], object]) -> Any:
    """Watch child ``pid`` for ``loop``: with a pidfd where the kernel has them, else a thread."""
    if _can_use_pidfd():
        return _PidfdWatcher(loop, pid, callback)
    return _ThreadWatcher(loop, pid, callback)


class _PidfdWatcher:
    """One child, watched through a pidfd in the loop's selector (pidfd_open(2))."""

    def __init__(self, loop: SelectorEventLoop, pid: int,
                 callback: Callable[[int], object]) -> None:
        self._loop = loop
        self._pid = pid
        self._callback: Callable[[int], object] | None = callback
        self._reaped = False
        self._pidfd: int | None = os.pidfd_open(pid)
        loop._add_reader(self._pidfd, self._exited)
        loop._child_watchers.add(self)

    def _exited(self) -> None:
        returncode = _reap(self._pid, os.WNOHANG)
        if returncode is None:
            return  # not yet: a spurious wake-up
        self._reaped = True
        callback = self._callback
        self.close()
        if callback is not None:
            callback(returncode)

    def send_signal(self, sig: int) -> None:
        """Signal the child; ProcessLookupError if it is gone (pidfd_send_signal(2))."""
        if self._reaped:
            raise ProcessLookupError(self._pid)
        if self._pidfd is not None:
            signal.pidfd_send_signal(self._pidfd, sig)
        else:
            # The loop closed and took the pidfd; the child is not reaped, so
            # its pid is still its own.
            os.kill(self._pid, sig)

    def close(self) -> None:
        """Stop watching and let the transport go; the child may still be signalled."""
        self._callback = None
        if self._pidfd is not None:
            self._loop._child_watchers.discard(self)
            self._loop._remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


class _ThreadWatcher:
    """One child, watched by a thread blocked in waitpid(2) for it.

    Discussion: the thread first waits with waitid(2)'s WNOWAIT, which
    returns at the exit but leaves the zombie in place, and only then reaps,
    under a lock that send_signal also takes.  While the zombie exists its
    pid cannot be given to a new process; so a signal sent under the lock
    reaches our child or nobody, never a stranger that got the pid.  (Where
    there is no waitid, the thread reaps in one blocking waitpid, outside
    the lock, and that small window stays open.)
    """

    def __init__(self, loop: SelectorEventLoop, pid: int,
                 callback: Callable[[int], object]) -> None:
        self._loop = loop
        self._pid = pid
        self._callback: Callable[[int], object] | None = callback
        self._lock = threading.Lock()
        self._reaped = False
        loop._child_watchers.add(self)
        threading.Thread(target=self._wait, name=f"tinyloop-waitpid-{pid}", daemon=True).start()

    def _wait(self) -> None:
        if hasattr(os, "waitid") and hasattr(os, "WNOWAIT"):
            try:
                os.waitid(os.P_PID, self._pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass  # _reap says so
            with self._lock:
                returncode = _reap(self._pid, 0)
                self._reaped = True
        else:
            returncode = _reap(self._pid, 0)
            self._reaped = True
        if self._callback is None:
            return  # the loop closed and let us go: nobody to tell
        try:
            self._loop.call_soon_threadsafe(self._report, returncode)
        except RuntimeError:  # the loop closed just now
            logger.warning("Loop %r that handles pid %r is closed", self._loop, self._pid)

    def _report(self, returncode: int) -> None:  # on the loop's thread
        callback = self._callback
        self.close()
        if callback is not None:
            callback(returncode)

    def send_signal(self, sig: int) -> None:
        """Signal the child; ProcessLookupError if it is gone (kill(2))."""
        with self._lock:
            if self._reaped:
                raise ProcessLookupError(self._pid)
            os.kill(self._pid, sig)

    def close(self) -> None:
        """Let the transport go; the thread ends by itself when the child does."""
        self._callback = None
        self._loop._child_watchers.discard(self)


class _UnixSubprocessTransport(base_subprocess.BaseSubprocessTransport):
    """A child started with :class:`subprocess.Popen`, its exit learnt from a child watcher."""

    def _start(self, args: Any, shell: bool, stdin: Any, stdout: Any, stderr: Any,
               bufsize: int, **kwargs: Any) -> None:
        self._proc = subprocess.Popen(args, shell=shell, stdin=stdin, stdout=stdout,
                                      stderr=stderr, universal_newlines=False, bufsize=bufsize,
                                      **kwargs)
        try:
            self._watcher = _watch_child(self._loop, self._proc.pid, self._process_exited)
        except BaseException:  # pidfd_open failed (EMFILE): nobody would reap the child
            self._proc.kill()
            self._proc.wait()
            raise

    def _send_signal(self, sig: int) -> None:
        self._watcher.send_signal(sig)
