"""A child process seen as a transport: one object that owns the process and
up to three pipe transports (stdin, stdout, stderr), and turns what they
report into the calls of an asyncio.SubprocessProtocol.  It reads beside
CPython's Lib/asyncio/base_subprocess.py, which has the same job; the
Unix part (starting the child, learning of its exit) is in unix_events.py.

    stdin  <-- _UnixWritePipeTransport <-- _PipeProtocol(fd 0) --+
    stdout --> _UnixReadPipeTransport  --> _PipeProtocol(fd 1) --+--> BaseSubprocessTransport
    stderr --> _UnixReadPipeTransport  --> _PipeProtocol(fd 2) --+      --> SubprocessProtocol
    exit   --> a child watcher (unix_events.py) -----------------+

Rules this file keeps:
  * The protocol hears ``connection_made`` first and ``connection_lost``
    last.  Whatever happens before connection_made (data on stdout, even
    the exit) waits in ``_pending`` and is replayed in order after it.
  * ``connection_lost`` comes only when both halves are over: the process
    has exited (``process_exited`` called) *and* every pipe has closed
    (``pipe_connection_lost`` called for each).  Either may come first.
  * ``_wait()`` (what asyncio.subprocess.Process.wait awaits) returns the
    exit code: at once if it is known, else when connection_lost has run.
  * The exit code is the child watcher's, in ``os.waitstatus_to_exitcode``
    form: the exit status, or minus the signal number that killed it.
  * A transport nobody closed kills its child when it is collected, and
    says so with a ResourceWarning, as asyncio's does.

Where this differs from CPython, and why:
  * The pipe transports are built synchronously when the process starts,
    not in a task that awaits connect_read_pipe/connect_write_pipe: so
    close() always has them to close, however early it is called.
  * Signals go through the child watcher (a pidfd where there is one:
    no chance of signalling a recycled pid), never through Popen, whose
    send_signal first polls, that is reaps, the child behind the
    watcher's back.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import warnings
from collections.abc import Callable
from signal import SIGKILL, SIGTERM
from typing import Any

from tinyloop.aio.futures import _set_result_unless_cancelled
from tinyloop.aio.transports import source_traceback, unclosed_message

__all__ = ["BaseSubprocessTransport"]

logger = logging.getLogger("asyncio")

STDIN, STDOUT, STDERR = 0, 1, 2


class BaseSubprocessTransport(asyncio.SubprocessTransport):
    """A running child process and its pipes, as an ``asyncio.SubprocessTransport``.

    ``args`` and ``shell`` are :class:`subprocess.Popen`'s; ``stdin``,
    ``stdout`` and ``stderr`` are each ``subprocess.PIPE`` (a pipe
    transport is made for it), ``subprocess.DEVNULL``, ``subprocess.STDOUT``
    (stderr only), a file descriptor, a file object, or None (inherited).
    ``waiter`` (a future) is set once ``protocol.connection_made`` has run.
    A subclass supplies :meth:`_start` (make ``self._proc``, start watching
    for the exit) and :meth:`_send_signal`.  Source: the asyncio docs,
    "Subprocess Transports" and "Subprocess Protocols".

    State (all of it):

        _proc          the subprocess.Popen (None once connection_lost ran)
        _pipes         fd (0, 1, 2) -> the _PipeProtocol of each PIPE
        _returncode    None until the child watcher reports the exit
        _pending       protocol calls held until connection_made (None after)
        _exit_waiters  futures of _wait() calls, set at connection_lost
        _closed        close() was called
        _finished      connection_lost is scheduled
    """

    def __init__(self, loop: Any, protocol: asyncio.SubprocessProtocol, args: Any, shell: bool,
                 stdin: Any, stdout: Any, stderr: Any, bufsize: int,
                 waiter: asyncio.Future | None = None, extra: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(extra)
        self._loop = loop
        self._source_traceback = source_traceback(loop)
        self._protocol: Any = protocol
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
        self._returncode: int | None = None
        self._pipes: dict[int, _PipeProtocol] = {}
        self._pending: list[tuple[Callable[..., object], tuple[Any, ...]]] | None = []
        self._exit_waiters: list[asyncio.Future] = []
        self._closed = False
        self._finished = False
        try:
            self._start(args=args, shell=shell, stdin=stdin, stdout=stdout, stderr=stderr,
                        bufsize=bufsize, **kwargs)
            self._pid = self._proc.pid  # type: ignore[union-attr]
            self._extra["subprocess"] = self._proc
            self._connect_pipes()
        except BaseException:
            self.close()
            raise
        if loop.get_debug():
            logger.debug("process %r created: pid %s", args if shell else args[0], self._pid)
        # The pipes' own connection_made calls are queued already; ours follows
        # them, then the waiter: whoever awaits it finds the protocol connected.
        loop.call_soon(self._connection_made)
        if waiter is not None:
            loop.call_soon(_set_result_unless_cancelled, waiter, None)

    def __repr__(self) -> str:
        info = [type(self).__name__, f"pid={self._pid}"]
        info.append("running" if self._returncode is None else f"returncode={self._returncode}")
        if self._closed:
            info.append("closed")
        for fd, name in enumerate(("stdin", "stdout", "stderr")):
            if fd in self._pipes:
                info.append(f"{name}={self._pipes[fd].pipe!r}")
        return f"<{' '.join(info)}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if not getattr(self, "_closed", True):
            _warn(unclosed_message(self), ResourceWarning, source=self)
            self.close()

    # -- What the subclass supplies ----------------------------------------------

    def _start(self, args: Any, shell: bool, stdin: Any, stdout: Any, stderr: Any,
               bufsize: int, **kwargs: Any) -> None:
        """Start the child (set ``self._proc``) and watch for its exit."""
        raise NotImplementedError

    def _send_signal(self, sig: int) -> None:
        raise NotImplementedError

    # -- Setting up ----------------------------------------------------------------

    def _connect_pipes(self) -> None:
        """A pipe transport for each of the child's pipes, writing to fd 0, reading from 1 and 2."""
        proc: Any = self._proc
        for fd, file in ((STDIN, proc.stdin), (STDOUT, proc.stdout), (STDERR, proc.stderr)):
            if file is None:
                continue
            protocol = _PipeProtocol(self, fd)
            make = (self._loop._make_write_pipe_transport if fd == STDIN
                    else self._loop._make_read_pipe_transport)
            protocol.pipe = make(file, protocol)
            self._pipes[fd] = protocol

    def _connection_made(self) -> None:
        try:
            self._protocol.connection_made(self)
        finally:
            pending, self._pending = self._pending, None
            for callback, args in pending or ():
                self._loop.call_soon(callback, *args)

    def _call(self, callback: Callable[..., object], *args: Any) -> None:
        """Call the protocol soon, but never before connection_made (see the rules)."""
        if self._pending is not None:
            self._pending.append((callback, args))
        else:
            self._loop.call_soon(callback, *args)

    # -- The public interface (asyncio.SubprocessTransport) ---------------------------

    def get_pid(self) -> int | None:
        return self._pid

    def get_returncode(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""
        return self._returncode

    def get_pipe_transport(self, fd: int) -> asyncio.BaseTransport | None:
        """The transport of the child's ``fd`` (0, 1 or 2), or None if it was not a PIPE."""
        protocol = self._pipes.get(fd)
        return None if protocol is None else protocol.pipe

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closed

    def send_signal(self, signal: int) -> None:
        """Send ``signal`` to the child; nothing if it has exited already.

        Raises ProcessLookupError once the transport is finished (as
        asyncio does).  See kill(2), pidfd_send_signal(2).
        """
        if self._proc is None:
            raise ProcessLookupError()
        if self._returncode is None:  # once reaped, the pid may be someone else's
            self._send_signal(signal)

    def terminate(self) -> None:
        """SIGTERM: ask the child to exit."""
        self.send_signal(SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the child dies without a say."""
        self.send_signal(SIGKILL)

    def close(self) -> None:
        """Close the pipes; kill the child if it is still running.  Idempotent.

        Discussion: closing is not waiting.  connection_lost (and ``_wait()``)
        still come when the child has exited and the pipes have closed.
        """
        if self._closed:
            return
        self._closed = True
        if self._proc is not None and self._returncode is None:
            if self._loop.get_debug():
                logger.warning("Close running child process: kill %r", self)
            try:
                self._send_signal(SIGKILL)
            except ProcessLookupError:
                pass
        if self._loop.is_closed():
            return  # nothing can be scheduled: each pipe transport closes its file when collected
        for protocol in self._pipes.values():
            protocol.pipe.close()

    async def _wait(self) -> int:
        """The exit code, once the child has exited and the transport is finished."""
        if self._returncode is not None:
            return self._returncode
        waiter = self._loop.create_future()
        self._exit_waiters.append(waiter)
        return await waiter

    # -- Reports from the pipes and the child watcher ----------------------------------

    def _pipe_data_received(self, fd: int, data: bytes) -> None:
        self._call(self._protocol.pipe_data_received, fd, data)

    def _pipe_connection_lost(self, fd: int, exc: BaseException | None) -> None:
        self._call(self._protocol.pipe_connection_lost, fd, exc)
        self._try_finish()

    def _process_exited(self, returncode: int) -> None:
        """The child watcher's report: the child has exited and been reaped."""
        if self._returncode is not None:
            return
        if self._loop.get_debug():
            logger.info("%r exited with return code %r", self, returncode)
        self._returncode = returncode
        # Popen still thinks the child runs (the watcher reaped it, not Popen);
        # told nothing, it would poll for it later and warn in __del__.
        if self._proc is not None and self._proc.returncode is None:
            self._proc.returncode = returncode
        self._call(self._protocol.process_exited)
        self._try_finish()

    def _try_finish(self) -> None:
        if self._finished or self._returncode is None:
            return
        if all(protocol.disconnected for protocol in self._pipes.values()):
            self._finished = True
            # Through _call: after process_exited and every pipe_connection_lost.
            self._call(self._call_connection_lost, None)

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            for waiter in self._exit_waiters:
                if not waiter.done():
                    waiter.set_result(self._returncode)
            self._exit_waiters = []
            self._proc = None
            self._protocol = None


class _PipeProtocol(asyncio.Protocol):
    """The protocol on one of the child's pipes: it reports to the subprocess transport.

    ``fd`` is the child's descriptor (0, 1 or 2); ``pipe`` its transport.
    Flow control on stdin is the subprocess protocol's: pause_writing and
    resume_writing are passed on (asyncio.subprocess's ``stdin.drain()``
    waits on them).
    """

    def __init__(self, process: BaseSubprocessTransport, fd: int) -> None:
        self.process: BaseSubprocessTransport | None = process
        self.fd = fd
        self.pipe: Any = None
        self.disconnected = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} fd={self.fd} pipe={self.pipe!r}>"

    def data_received(self, data: bytes) -> None:
        self.process._pipe_data_received(self.fd, data)  # type: ignore[union-attr]

    def connection_lost(self, exc: BaseException | None) -> None:
        self.disconnected = True
        process, self.process = self.process, None
        process._pipe_connection_lost(self.fd, exc)  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        if self.process is not None:
            self.process._protocol.pause_writing()

    def resume_writing(self) -> None:
        if self.process is not None:
            self.process._protocol.resume_writing()
