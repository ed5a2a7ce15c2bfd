"""The asyncio loop minus the I/O: scheduling with contexts, running a future
to completion, tasks and their factory, async generators, the default
executor, name resolution, and the connection logic (Happy Eyeballs,
create_server, Server, start_tls, sendfile) written against a few methods
that selector_events.py supplies.  It reads beside CPython's
Lib/asyncio/base_events.py, which has the same job.

Rules this file keeps:
  * Part II's reactor is the base class.  The ready queue, the timer heap,
    the self-pipe, add_reader and the exception handler are inherited
    unchanged (tinyloop/callbacks/loop.py), and so is the four-step
    run_once, whose last step we run without Part II's per-callback
    wrapper when there is nothing for it to do (run_once below); this
    file adds what asyncio's contract asks on top: a context per
    callback, the running loop registered with asyncio, and the
    coroutine APIs.
  * asyncio's Future and Task are used as they are (uvloop does the same).
    They need four things of a loop: call_soon(..., context=),
    get_debug(), call_exception_handler(), and asyncio's running-loop slot
    set while we run (asyncio.get_running_loop() reads it).
  * No I/O here.  Whatever touches a socket is a method of
    BaseSelectorEventLoop (selector_events.py); this file only calls the
    ``sock_*`` coroutines and the ``_make_*_transport`` factories.
  * Every blocking call goes to the default executor (getaddrinfo,
    getnameinfo, reading a file for sendfile's fallback), never the loop's
    thread.

Where this differs from CPython, and why:
  * Server.wait_closed() waits for the clients to leave on every Python
    (3.12's behaviour; 3.11's returned at once after close()).
  * Happy Eyeballs is one small coroutine here (_staggered_connect) where
    asyncio has a module of its own (staggered.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import heapq
import inspect
import itertools
import logging
import os
import socket
import ssl as ssl_module
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tinyloop.aio.events import (DebugHandle, DebugTimerHandle, Handle, TimerHandle,
                                 debug_from_environment)
from tinyloop.aio.futures import _set_result_unless_cancelled  # also read here by tinyloop.uv
from tinyloop.callbacks import loop as reactor

__all__ = ["BaseEventLoop", "Server"]

logger = logging.getLogger("asyncio")

# How many frames of a coroutine's creation debug mode records (asyncio: 10).
DEBUG_STACK_DEPTH = 10
# sendfile's fallback reads the file in pieces of this many bytes.
SENDFILE_FALLBACK_CHUNK = 256 * 1024


def _run_until_complete_cb(future: asyncio.Future) -> None:
    if not future.cancelled():
        exc = future.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            return  # it is unwinding out of run_forever already
    future.get_loop().stop()


def _numeric_address(host: Any, port: Any, family: int, type_: int, proto: int
                     ) -> tuple[Any, ...] | None:
    """The getaddrinfo() entry for a numeric ``host``, or None if it needs the resolver.

    Discussion: resolving ``"127.0.0.1"`` through getaddrinfo() in a thread
    costs a thread hop per connection for an answer we can read off the
    string; asyncio skips it the same way (base_events._ipaddr_info).
    """
    if not isinstance(host, (str, bytes)) or not isinstance(port, int) or type_ not in (
            socket.SOCK_STREAM, socket.SOCK_DGRAM) or proto not in (0, socket.IPPROTO_TCP,
                                                                   socket.IPPROTO_UDP):
        return None
    if isinstance(host, bytes):
        host = host.decode("idna")
    host = host.partition("%")[0]  # an IPv6 scope id goes to the resolver
    for af in (socket.AF_INET, socket.AF_INET6):
        if family not in (socket.AF_UNSPEC, af):
            continue
        try:
            socket.inet_pton(af, host)
        except (OSError, ValueError):
            continue
        proto = proto or (socket.IPPROTO_TCP if type_ == socket.SOCK_STREAM else socket.IPPROTO_UDP)
        address = (host, port) if af == socket.AF_INET else (host, port, 0, 0)
        return af, type_, proto, "", address
    return None


def _interleave_families(infos: list[tuple[Any, ...]], first_count: int = 1) -> list[tuple[Any, ...]]:
    """Reorder getaddrinfo() results so address families alternate (RFC 8305, section 4).

    ``first_count`` addresses of the first family come first, then one of
    each family in turn.
    """
    by_family: dict[int, collections.deque] = collections.OrderedDict()
    for info in infos:
        by_family.setdefault(info[0], collections.deque()).append(info)
    queues = list(by_family.values())
    ordered = [queues[0].popleft() for _ in range(min(first_count - 1, len(queues[0])))]
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.popleft())
    return ordered


class Server(asyncio.AbstractServer):
    """The listening sockets of ``create_server``, and the connections they accepted.

    ``sockets`` is the tuple of listening sockets (empty once closed).  The
    server tracks its clients' transports (attached when accepted, detached
    when their connection is lost) so that :meth:`wait_closed` returns only
    when the server is closed *and* every client has gone, and so that
    :meth:`close_clients`/:meth:`abort_clients` reach them all.  Source: the
    asyncio docs, "Server Objects".
    """

    def __init__(self, loop: BaseEventLoop, sockets: list[socket.socket],
                 protocol_factory: Callable[[], asyncio.BaseProtocol],
                 ssl_context: ssl_module.SSLContext | None, backlog: int,
                 ssl_handshake_timeout: float | None, ssl_shutdown_timeout: float | None) -> None:
        self._loop = loop
        self._sockets: list[socket.socket] | None = sockets
        self._protocol_factory = protocol_factory
        self._ssl_context = ssl_context
        self._backlog = backlog
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        self._clients: weakref.WeakSet[asyncio.Transport] = weakref.WeakSet()
        self._waiters: list[asyncio.Future] | None = []  # wait_closed() callers; None once woken
        self._serving = False
        self._serving_forever: asyncio.Future | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} sockets={self.sockets!r}>"

    # Called by the transports of accepted connections.
    def _attach(self, transport: asyncio.Transport) -> None:
        self._clients.add(transport)

    def _detach(self, transport: asyncio.Transport) -> None:
        self._clients.discard(transport)
        if not self._clients and self._sockets is None:
            self._wakeup()

    def _wakeup(self) -> None:
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def _start_serving(self) -> None:
        if self._serving:
            return
        self._serving = True
        for sock in self._sockets or ():
            sock.listen(self._backlog)
            self._loop._start_serving(self._protocol_factory, sock, self._ssl_context, self,
                                      self._backlog, self._ssl_handshake_timeout,
                                      self._ssl_shutdown_timeout)

    def get_loop(self) -> BaseEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets or ())

    def close(self) -> None:
        """Stop listening and close the listening sockets; the clients stay connected.

        Idempotent.  A ``serve_forever()`` in progress is cancelled.
        """
        sockets = self._sockets
        if sockets is None:
            return
        self._sockets = None
        for sock in sockets:
            self._loop._stop_serving(sock)
        self._serving = False
        if self._serving_forever is not None and not self._serving_forever.done():
            self._serving_forever.cancel()
            self._serving_forever = None
        if not self._clients:
            self._wakeup()

    def close_clients(self) -> None:
        """Close every client's transport (flushing what it buffered); Python 3.13's API."""
        for transport in list(self._clients):
            transport.close()

    def abort_clients(self) -> None:
        """Abort every client's transport, dropping what it buffered; Python 3.13's API."""
        for transport in list(self._clients):
            transport.abort()

    async def start_serving(self) -> None:
        """Start accepting, if ``create_server(start_serving=False)`` did not."""
        self._start_serving()
        await asyncio.sleep(0)  # let the loop register the listeners

    async def serve_forever(self) -> None:
        """Accept connections until this coroutine is cancelled; then close the server.

        Raises RuntimeError if the server is closed or already being served forever.
        """
        if self._serving_forever is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._sockets is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever = self._loop.create_future()
        try:
            await self._serving_forever
        except asyncio.CancelledError:
            try:
                self.close()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever = None

    async def wait_closed(self) -> None:
        """Return once the server is closed and every client connection has been lost."""
        if self._waiters is None:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class BaseEventLoop(reactor.Loop, asyncio.AbstractEventLoop):
    """Part II's reactor, grown into an ``asyncio.AbstractEventLoop``.

    ``selector`` and ``clock`` are injected as in Part II (seconds, monotonic).
    ``debug=None`` reads the environment (:func:`tinyloop.aio.events.debug_from_environment`).
    """

    _logger = logger
    # None until the first run_in_executor(None, ...); a class default too, for
    # code that may meet a loop half made (tinyloop.uv's at-fork hook).
    _default_executor: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def handle_class(self) -> type[Handle]:  # type: ignore[override]
        """What add_reader/add_writer wrap a callback in (Part II's switch): in
        debug mode a handle that keeps the stack that made it."""
        return DebugHandle if self._debug else Handle

    def __init__(self, selector: Any = None, clock: Callable[[], float] = time.monotonic, *,
                 debug: bool | None = None) -> None:
        self._default_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor_shutdown_called = False
        self._task_factory: Callable[..., asyncio.Future] | None = None
        self._asyncgens: weakref.WeakSet = weakref.WeakSet()
        self._asyncgens_shutdown_called = False
        self._origin_tracking_enabled = False  # we set the depth, and saved the old one
        self._origin_tracking_saved_depth = 0
        super().__init__(selector, clock,
                         debug=debug_from_environment() if debug is None else debug)

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if not getattr(self, "_closed", True):
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
            if not self.is_running():
                self.close()

    # -- Scheduling, with a context ------------------------------------------------

    def call_soon(self, callback: Callable[..., object], *args: Any,
                  context: Any = None) -> Handle:
        """Run ``callback(*args)`` in ``context`` in the next iteration; see Part II's call_soon.

        ``context`` is a :class:`contextvars.Context` (None: a copy of the
        current one).  Returns a :class:`Handle`.  Raises RuntimeError if the
        loop is closed; in debug mode also TypeError for a non-callable or a
        coroutine function, and RuntimeError from another thread.
        """
        if self._closed:
            self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_soon")
            handle: Handle = DebugHandle(callback, args, self, context)
            del handle._source_traceback[-1]  # this frame: the stack ends at our caller
        else:
            handle = Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any,
                   context: Any = None) -> TimerHandle:
        """Run ``callback(*args)`` after ``delay`` seconds; returns a :class:`TimerHandle`."""
        if delay is None:
            raise TypeError("delay must not be None")
        timer = self.call_at(self.time() + delay, callback, *args, context=context)
        if timer._source_traceback:
            del timer._source_traceback[-1]  # this frame, as in call_at
        return timer

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,
                context: Any = None) -> TimerHandle:
        """Run ``callback(*args)`` at ``when`` (seconds on :meth:`time`); see Part II's call_at."""
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:
            self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
            timer: TimerHandle = DebugTimerHandle(when, next(self._sequence), callback, args,
                                                  self, context)
            del timer._source_traceback[-1]
        else:
            timer = TimerHandle(when, next(self._sequence), callback, args, self, context)
        heapq.heappush(self._scheduled, timer)
        timer._in_heap = True
        return timer

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any,
                             context: Any = None) -> Handle:
        """Like :meth:`call_soon`, from any thread; wakes the loop through the self-pipe."""
        self._check_callback(callback, "call_soon_threadsafe")
        handle = (DebugHandle if self._debug else Handle)(callback, args, self, context)
        self._ready.append(handle)
        self._write_to_self()
        return handle

    def _check_callback(self, callback: object, method: str) -> None:
        super()._check_callback(callback, method)
        # Discussion: a coroutine function passed as a callback would make a
        # coroutine object and drop it ("never awaited").  Its code object
        # carries the CO_COROUTINE flag (bound methods pass __code__ through),
        # a cheap test for every call that checks.  In debug mode we also ask
        # inspect.iscoroutinefunction, as asyncio does: it sees through
        # functools.partial and inspect.markcoroutinefunction too.
        code = getattr(callback, "__code__", None)
        if (code is not None and code.co_flags & inspect.CO_COROUTINE) or (
                self._debug and inspect.iscoroutinefunction(callback)):
            raise TypeError(f"coroutines cannot be used with {method}()")

    # Discussion: call_soon and call_at check the callback in debug mode
    # only, as asyncio does; outside it they check just that the loop is
    # open.  The checks cost more than the rest of call_soon together, and a
    # wrong callback still fails, one iteration later, through the exception
    # handler.

    # Discussion: Part II's checks say what went wrong in its own words;
    # here they say it in asyncio's, because programs and test suites match
    # on these messages ("Event loop is closed" above all).

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    def _check_thread(self) -> None:
        if self._thread_id is not None and self._thread_id != threading.get_ident():
            raise RuntimeError("Non-thread-safe operation invoked on an event loop other "
                               "than the current one")

    # -- Futures and tasks ---------------------------------------------------------

    def create_future(self) -> asyncio.Future:
        """A new ``asyncio.Future`` bound to this loop."""
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None, context: Any = None,
                    **kwargs: Any) -> asyncio.Task:
        """Wrap ``coro`` in a task (or whatever the task factory makes) and schedule it.

        ``name`` names the task; ``context`` is the Context its steps run in.
        Further keywords (``eager_start`` on 3.14) go to the task factory.
        Raises RuntimeError if the loop is closed.
        """
        self._check_closed()
        if self._task_factory is None:
            task = asyncio.Task(coro, loop=self, name=name, context=context, **kwargs)
            if task._source_traceback:  # debug mode: where the task was made, not here
                del task._source_traceback[-1]
            return task
        # The factory's signature is (loop, coro, **kwargs); the context is
        # passed only when given, so factories written before 3.11 still work.
        if context is not None:
            kwargs["context"] = context
        task = self._task_factory(self, coro, **kwargs)
        if name is not None:
            task.set_name(name)
        return task

    def set_task_factory(self, factory: Callable[..., asyncio.Future] | None) -> None:
        """Make tasks with ``factory(loop, coro, **kwargs)`` (e.g. asyncio.eager_task_factory)."""
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory

    def get_task_factory(self) -> Callable[..., asyncio.Future] | None:
        return self._task_factory

    # -- Running ---------------------------------------------------------------------

    def _check_running(self) -> None:
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if asyncio.events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def run_forever(self) -> None:
        """Run until :meth:`stop`, with this loop registered as asyncio's running loop.

        Raises RuntimeError if the loop is closed, already running, or another
        loop runs in this thread.
        """
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self._debug)
        old_hooks = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=self._asyncgen_firstiter_hook,
                               finalizer=self._asyncgen_finalizer_hook)
        asyncio.events._set_running_loop(self)
        try:
            super().run_forever()
        finally:
            asyncio.events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_hooks)

    def _run_ready(self) -> None:
        """Part II's step 4, run as asyncio's ``_run_once`` runs it.

        Discussion: Part II runs each ready handle through ``_run_handle``,
        which times it in debug mode and calls the instruments.  With neither
        on, that is one more Python call per callback, on the path every
        read and every task step takes, for nothing: asyncio calls
        ``handle._run()`` from its iteration directly, and so do we.  In
        debug mode or with an instrument, Part II's step runs as it is.
        """
        if self._debug or self._instrument is not None:
            super()._run_ready()
            return
        ready = self._ready
        # A countdown, not ``for _ in range(len(ready))``: on 3.11 making the
        # range costs as much as running a handle, once per iteration.
        todo = len(ready)
        while todo:
            todo -= 1
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()
        # A callback's error holds, through its traceback, the frames that
        # ran it, this one with them: let go of the last handle, or the
        # error and the handle's arguments (a failed future) make a cycle
        # that only the cyclic GC frees (asyncio clears its handle here too).
        handle = None  # type: ignore[assignment]

    def run_until_complete(self, future: Awaitable[Any]) -> Any:
        """Run until ``future`` (a future, task or coroutine) is done; return its result.

        Raises what the future raised, or RuntimeError if the loop was
        stopped first.
        """
        self._check_closed()
        self._check_running()
        new_task = not asyncio.isfuture(future)
        future = asyncio.ensure_future(future, loop=self)
        if new_task:
            # An exception raised out of run_forever leaves it pending: say nothing.
            future._log_destroy_pending = False  # type: ignore[attr-defined]
        future.add_done_callback(_run_until_complete_cb)
        try:
            self.run_forever()
        except BaseException:
            if new_task and future.done() and not future.cancelled():
                future.exception()  # it propagates now: not "never retrieved"
            raise
        finally:
            future.remove_done_callback(_run_until_complete_cb)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def close(self) -> None:
        """Close the loop: drop pending callbacks, shut the executor down without waiting.

        Idempotent; raises RuntimeError if the loop is running.
        """
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self._debug:
            logger.debug("Close %r", self)
        executor, self._default_executor = self._default_executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        super().close()

    def set_debug(self, enabled: bool) -> None:
        super().set_debug(enabled)
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, enabled)

    def _set_coroutine_origin_tracking(self, enabled: bool) -> None:
        """In debug mode "coroutine ... was never awaited" says where the coroutine
        was created (sys.set_coroutine_origin_tracking_depth).

        The depth is the process's, not the loop's: we set it only while a
        loop in debug mode runs, and put back what we found (asyncio's rule),
        so a program's own setting survives us.
        """
        if bool(enabled) == self._origin_tracking_enabled:
            return
        if enabled:
            self._origin_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()
            sys.set_coroutine_origin_tracking_depth(DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._origin_tracking_saved_depth)
        self._origin_tracking_enabled = bool(enabled)

    # -- Async generators (PEP 525) --------------------------------------------------
    #
    # Discussion: an async generator that is dropped half-way still has
    # ``finally`` blocks to run, and running them needs the loop (they may
    # await).  Python calls the *finalizer hook* when such a generator is
    # collected; we schedule its aclose() as a task.  The firstiter hook
    # records every generator started, so shutdown_asyncgens() can close the
    # ones still alive when the program ends.

    def _asyncgen_firstiter_hook(self, agen: Any) -> None:
        if self._asyncgens_shutdown_called:
            warnings.warn(f"asynchronous generator {agen!r} was scheduled after "
                          "loop.shutdown_asyncgens() call", ResourceWarning, source=self)
        self._asyncgens.add(agen)

    def _asyncgen_finalizer_hook(self, agen: Any) -> None:
        self._asyncgens.discard(agen)
        if not self.is_closed():
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    async def shutdown_asyncgens(self) -> None:
        """Close every async generator still open (``asyncio.run`` calls this at the end)."""
        self._asyncgens_shutdown_called = True
        if not self._asyncgens:
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await asyncio.gather(*[agen.aclose() for agen in closing], return_exceptions=True)
        for agen, result in zip(closing, results):
            if isinstance(result, Exception):
                self.call_exception_handler({
                    "message": f"an error occurred during closing of asynchronous generator {agen!r}",
                    "exception": result, "asyncgen": agen,
                })

    # -- Threads ---------------------------------------------------------------------

    def run_in_executor(self, executor: concurrent.futures.Executor | None,
                        func: Callable[..., Any], *args: Any) -> asyncio.Future:
        """Run ``func(*args)`` in ``executor`` (None: the default thread pool); await the result.

        Raises RuntimeError if the loop is closed or its default executor was
        shut down.  ``asyncio.to_thread`` comes through here.
        """
        self._check_closed()
        if self._debug:
            self._check_callback(func, "run_in_executor")
        if executor is None:
            executor = self._default_executor
            if self._executor_shutdown_called:
                raise RuntimeError("Executor shutdown has been called")
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default_executor = executor
        return asyncio.wrap_future(executor.submit(func, *args), loop=self)

    def set_default_executor(self, executor: concurrent.futures.ThreadPoolExecutor) -> None:
        """Use ``executor`` for ``run_in_executor(None, ...)``; TypeError unless a ThreadPoolExecutor."""
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor")
        self._default_executor = executor

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Wait (at most ``timeout`` seconds) for the default executor's threads to finish.

        Joins the pool in a thread of its own, so the loop keeps running
        meanwhile.  On time-out, warns (RuntimeWarning) and stops waiting.
        """
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is None:
            return
        done = self.create_future()

        def join() -> None:
            try:
                executor.shutdown(wait=True)
                if not self.is_closed():
                    self.call_soon_threadsafe(_set_result_unless_cancelled, done, None)
            except Exception as exc:  # pragma: no cover - shutdown itself failed
                if not self.is_closed():
                    self.call_soon_threadsafe(done.set_exception, exc)

        thread = threading.Thread(target=join, name="tinyloop-executor-shutdown")
        thread.start()
        try:
            await asyncio.wait_for(done, timeout)
        except TimeoutError:
            warnings.warn("The executor did not finishing joining its threads within "
                          f"{timeout} seconds.", RuntimeWarning, stacklevel=2)
            executor.shutdown(wait=False)
        else:
            # The thread's last act was to wake us, and it ends a moment
            # later.  asyncio joins it here, blocking the loop's thread for
            # that moment; we look (is_alive takes the thread's lock without
            # waiting) and let the loop run between looks.
            while thread.is_alive():
                await asyncio.sleep(0.001)

    # -- Names (in the executor: getaddrinfo(3) blocks) ------------------------------

    async def getaddrinfo(self, host: Any, port: Any, *, family: int = 0, type: int = 0,
                          proto: int = 0, flags: int = 0) -> list[tuple[Any, ...]]:
        """:func:`socket.getaddrinfo` in the default executor; raises :class:`socket.gaierror`."""
        return await self.run_in_executor(None, socket.getaddrinfo, host, port,
                                          family, type, proto, flags)

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int = 0) -> tuple[str, str]:
        """:func:`socket.getnameinfo` in the default executor."""
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)

    async def _resolve(self, host: Any, port: Any, *, family: int, type: int, proto: int,
                       flags: int) -> list[tuple[Any, ...]]:
        """getaddrinfo(), skipping the thread for a numeric host; OSError if nothing comes back."""
        info = _numeric_address(host, port, family, type, proto)
        infos = [info] if info is not None else await self.getaddrinfo(
            host, port, family=family, type=type, proto=proto, flags=flags)
        if not infos:
            raise OSError(f"getaddrinfo({host!r}) returned empty list")
        return infos

    # -- Connections ----------------------------------------------------------------

    async def create_connection(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: Any = None,
            port: Any = None, *, ssl: Any = None, family: int = 0, proto: int = 0,
            flags: int = 0, sock: socket.socket | None = None, local_addr: Any = None,
            server_hostname: str | None = None, ssl_handshake_timeout: float | None = None,
            ssl_shutdown_timeout: float | None = None, happy_eyeballs_delay: float | None = None,
            interleave: int | None = None, all_errors: bool = False,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """Connect a stream to ``host:port`` (or use the connected ``sock``); return (transport, protocol).

        Every address getaddrinfo() gives is tried in turn; with
        ``happy_eyeballs_delay`` (seconds) the next attempt starts that long
        after the previous one without waiting for it to fail (RFC 8305), and
        ``interleave`` alternates address families.  ``ssl`` (True or an
        SSLContext) wraps the connection in TLS, checking ``server_hostname``
        (default: ``host``).  Raises ValueError for contradictory arguments,
        the connect error when all attempts failed (an ExceptionGroup of them
        all with ``all_errors=True``), and TLS errors from the handshake.
        Source: the asyncio docs, "Opening network connections".
        """
        if server_hostname is not None and not ssl:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and ssl:
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None and sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        if happy_eyeballs_delay is not None and interleave is None:
            interleave = 1  # RFC 8305 recommends interleaving with Happy Eyeballs

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            infos = await self._resolve(host, port, family=family, type=socket.SOCK_STREAM,
                                        proto=proto, flags=flags)
            local_infos = None
            if local_addr is not None:
                local_infos = await self._resolve(*local_addr, family=family,
                                                  type=socket.SOCK_STREAM, proto=proto, flags=flags)
            if interleave:
                infos = _interleave_families(infos, interleave)
            errors: list[OSError] = []
            if happy_eyeballs_delay is None:
                for info in infos:
                    sock = await self._connect_sock(errors, info, local_infos)
                    if sock is not None:
                        break
            else:
                sock = await self._staggered_connect(errors, infos, local_infos, happy_eyeballs_delay)
            if sock is None:
                try:
                    raise self._connect_error(errors, all_errors)
                finally:
                    # The error's traceback holds this frame, and the frame
                    # holds ``errors``, which holds the error: a reference
                    # cycle that would keep every attempt's error (and its
                    # frames) alive until the cyclic GC runs.  asyncio
                    # breaks it the same way.
                    errors = None  # type: ignore[assignment]
        elif sock is None:
            raise ValueError("host and port was not specified and no sock specified")

        transport, protocol = await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout)
        return transport, protocol

    @staticmethod
    def _connect_error(errors: list[OSError], all_errors: bool) -> BaseException:
        if all_errors:
            return ExceptionGroup("create_connection failed", errors)
        if len(errors) == 1:
            return errors[0]
        messages = {str(exc) for exc in errors}
        if len(messages) == 1:
            return errors[0]
        return OSError(f"Multiple exceptions: {', '.join(str(exc) for exc in errors)}")

    async def _connect_sock(self, errors: list[OSError], info: tuple[Any, ...],
                            local_infos: list[tuple[Any, ...]] | None) -> socket.socket | None:
        """One connection attempt: the connected socket, or None with the error in ``errors``."""
        family, type_, proto, _, address = info
        sock = None
        try:
            sock = socket.socket(family, type_, proto)
            sock.setblocking(False)
            if local_infos is not None:
                # Discussion: when no local address binds, the attempt fails
                # with the last bind error, errno and all (a caller checks for
                # EADDRINUSE), as asyncio's does; it joins ``errors`` below.
                bind_error: OSError | None = None
                for local in local_infos:
                    if local[0] != family:
                        continue
                    try:
                        sock.bind(local[4])
                        break
                    except OSError as exc:
                        bind_error = OSError(exc.errno, f"error while attempting to bind on "
                                                        f"address {local[4]!r}: {exc.strerror.lower()}")
                else:
                    raise bind_error or OSError(
                        f"no matching local address with family={family} found")
            await self.sock_connect(sock, address)
            return sock
        except OSError as exc:
            errors.append(exc)
            if sock is not None:
                sock.close()
            return None
        except BaseException:
            if sock is not None:
                sock.close()
            raise
        finally:
            errors = None  # type: ignore[assignment]  # see create_connection: no cycle

    async def _staggered_connect(self, errors: list[OSError], infos: list[tuple[Any, ...]],
                                 local_infos: list[tuple[Any, ...]] | None,
                                 delay: float) -> socket.socket | None:
        """Happy Eyeballs (RFC 8305, section 5): start an attempt every ``delay`` seconds,
        or at once when the previous one fails; the first connected socket wins.

        Discussion: an attempt that loses the race may still connect, and
        its socket must be closed.  One that finishes after the winner is
        chosen is closed by the done-callback below; one that finishes in the
        same batch, by the loop that chooses.  The callback must not decide
        before there is a winner: a task's done-callbacks run before
        asyncio.wait() wakes us, so at that moment every socket, the
        winner's included, would look like a loser's.
        """
        pending = collections.deque(infos)
        running: set[asyncio.Task] = set()
        winner: socket.socket | None = None

        def close_loser(task: asyncio.Task) -> None:
            if winner is not None and not task.cancelled() and task.exception() is None:
                sock = task.result()
                if sock is not None and sock is not winner:
                    sock.close()

        try:
            while pending or running:
                if pending:
                    task = self.create_task(self._connect_sock(errors, pending.popleft(), local_infos))
                    task.add_done_callback(close_loser)
                    running.add(task)
                done, _ = await asyncio.wait(running, timeout=delay if pending else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.discard(task)
                    if task.exception() is None and task.result() is not None:
                        if winner is None:
                            winner = task.result()
                        else:
                            task.result().close()  # connected in the same batch: a loser
                if winner is not None:
                    return winner
            return None
        finally:
            for task in running:
                task.cancel()

    async def _create_connection_transport(
            self, sock: socket.socket, protocol_factory: Callable[[], asyncio.BaseProtocol],
            ssl: Any, server_hostname: str | None, server_side: bool = False,
            ssl_handshake_timeout: float | None = None, ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        sock.setblocking(False)
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            if ssl:
                sslcontext = ssl_module.create_default_context() if ssl is True else ssl
                transport = self._make_ssl_transport(
                    sock, protocol, sslcontext, waiter, server_side=server_side,
                    server_hostname=server_hostname, ssl_handshake_timeout=ssl_handshake_timeout,
                    ssl_shutdown_timeout=ssl_shutdown_timeout)
            else:
                transport = self._make_socket_transport(sock, protocol, waiter)
        except BaseException:
            sock.close()  # no transport owns it yet (a failing factory, a bad TLS argument)
            raise
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    def _make_ssl_transport(self, rawsock: socket.socket, protocol: asyncio.BaseProtocol,
                            sslcontext: ssl_module.SSLContext, waiter: asyncio.Future | None, *,
                            server_side: bool = False, server_hostname: str | None = None,
                            extra: dict[str, Any] | None = None, server: Server | None = None,
                            ssl_handshake_timeout: float | None = None,
                            ssl_shutdown_timeout: float | None = None) -> asyncio.Transport:
        """TLS is a protocol on a plain transport: SSLProtocol reads the socket's
        bytes and hands the application a transport of its own (sslproto.py)."""
        from tinyloop.aio import sslproto  # loaded by the programs that use TLS only
        ssl_protocol = sslproto.SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout)
        self._make_socket_transport(rawsock, ssl_protocol, extra=extra, server=server)
        return ssl_protocol._app_transport

    async def connect_accepted_socket(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], sock: socket.socket, *,
            ssl: ssl_module.SSLContext | None = None, ssl_handshake_timeout: float | None = None,
            ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """Wrap a connection accepted outside the loop in a transport (server side)."""
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and not ssl:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        return await self._create_connection_transport(
            sock, protocol_factory, ssl, None, server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout)

    async def create_server(
            self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: Any = None,
            port: Any = None, *, family: int = socket.AF_UNSPEC, flags: int = socket.AI_PASSIVE,
            sock: socket.socket | None = None, backlog: int = 100,
            ssl: ssl_module.SSLContext | None = None, reuse_address: bool | None = None,
            reuse_port: bool | None = None, keep_alive: bool | None = None,
            ssl_handshake_timeout: float | None = None, ssl_shutdown_timeout: float | None = None,
            start_serving: bool = True,
    ) -> Server:
        """Listen on ``host:port`` (every address it resolves to) or on ``sock``; return a :class:`Server`.

        ``host`` may be a string, a sequence of strings, or None/"" for every
        interface.  ``reuse_address`` (default True on Unix) sets
        SO_REUSEADDR, ``reuse_port`` SO_REUSEPORT, ``keep_alive`` SO_KEEPALIVE
        on accepted sockets; ``backlog`` is listen(2)'s.  Raises ValueError
        for contradictory arguments and OSError when an address cannot be
        bound (the sockets opened so far are closed).  Source: the asyncio
        docs, "Creating network servers".
        """
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if ssl_handshake_timeout is not None and ssl is None:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if ssl_shutdown_timeout is not None and ssl is None:
            raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")
        if sock is not None:
            if host is not None or port is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            sockets = [sock]
        else:
            if host is None and port is None:
                raise ValueError("Neither host/port nor sock were specified")
            if reuse_address is None:
                reuse_address = os.name == "posix" and sys.platform != "cygwin"
            hosts: Iterable[Any] = [None] if host in (None, "") else \
                [host] if isinstance(host, str) or not isinstance(host, Iterable) else host
            infos: list[tuple[Any, ...]] = []
            for one_host in hosts:
                infos += await self._resolve(one_host, port, family=family,
                                             type=socket.SOCK_STREAM, proto=0, flags=flags)
            sockets = []
            try:
                for info in dict.fromkeys(infos):  # getaddrinfo may repeat an entry
                    sockets.append(self._bound_socket(info, reuse_address, reuse_port))
            except BaseException:
                for opened in sockets:
                    opened.close()
                raise
        if keep_alive:
            for listener in sockets:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for listener in sockets:
            listener.setblocking(False)
        server = self._make_server(sockets, protocol_factory, ssl, backlog,
                                   ssl_handshake_timeout, ssl_shutdown_timeout)
        if start_serving:
            server._start_serving()
            await asyncio.sleep(0)  # let the loop register the listeners
        return server

    @staticmethod
    def _bound_socket(info: tuple[Any, ...], reuse_address: bool | None,
                      reuse_port: bool | None) -> socket.socket:
        family, type_, proto, _, address = info
        sock = socket.socket(family, type_, proto)
        try:
            if reuse_address:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                if not hasattr(socket, "SO_REUSEPORT"):
                    raise ValueError("reuse_port not supported by socket module")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                # One socket per family: let the IPv4 socket have IPv4 (RFC 3493, 5.3).
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(exc.errno, f"error while attempting to bind on address "
                                         f"{address!r}: {exc.strerror.lower()}") from None
        except BaseException:
            sock.close()
            raise
        return sock

    # -- TLS on an open connection -----------------------------------------------------

    async def start_tls(self, transport: asyncio.BaseTransport, protocol: asyncio.BaseProtocol,
                        sslcontext: ssl_module.SSLContext, *, server_side: bool = False,
                        server_hostname: str | None = None,
                        ssl_handshake_timeout: float | None = None,
                        ssl_shutdown_timeout: float | None = None) -> asyncio.Transport:
        """Upgrade ``transport`` to TLS; return the new transport ``protocol`` now writes to.

        The old transport must not be used afterwards.  Raises TypeError for a
        transport that cannot be upgraded or a non-SSLContext, and the
        handshake's errors (the connection is then closed).
        """
        if not isinstance(sslcontext, ssl_module.SSLContext):
            raise TypeError(f"sslcontext is expected to be an instance of ssl.SSLContext, "
                            f"got {sslcontext!r}")
        if not getattr(transport, "_start_tls_compatible", False):
            raise TypeError(f"transport {transport!r} is not supported by start_tls()")
        from tinyloop.aio import sslproto  # loaded by the programs that use TLS only
        waiter = self.create_future()
        ssl_protocol = sslproto.SSLProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout, ssl_shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=False)
        # Hold the bytes already in flight until the TLS layer is in place.
        transport.pause_reading()  # type: ignore[attr-defined]
        transport.set_protocol(ssl_protocol)
        connection_made = self.call_soon(ssl_protocol.connection_made, transport)
        resume = self.call_soon(transport.resume_reading)  # type: ignore[attr-defined]
        try:
            await waiter
        except BaseException:
            transport.close()
            connection_made.cancel()
            resume.cancel()
            raise
        return ssl_protocol._app_transport

    # -- sendfile -------------------------------------------------------------------

    async def sock_sendfile(self, sock: socket.socket, file: Any, offset: int = 0,
                            count: int | None = None, *, fallback: bool = True) -> int:
        """Send ``count`` bytes of ``file`` (all, if None) from ``offset`` on ``sock``; return bytes sent.

        The zero-copy path (os.sendfile(2), in selector_events.py) is tried
        first; without it, ``fallback=True`` reads the file in the executor
        and sends what it read.  Raises asyncio.SendfileNotAvailableError
        when neither is allowed, ValueError for a bad offset or count.
        """
        self._check_sendfile_params(sock, file, offset, count)
        try:
            return await self._sock_sendfile_native(sock, file, offset, count)
        except asyncio.SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_fallback(sock, file, offset, count)

    @staticmethod
    def _check_sendfile_params(sock: socket.socket, file: Any, offset: int, count: int | None) -> None:
        if "b" not in getattr(file, "mode", "b"):
            raise ValueError("file should be opened in binary mode")
        if sock.type != socket.SOCK_STREAM:
            raise ValueError("only SOCK_STREAM type sockets are supported")
        if count is not None and (not isinstance(count, int) or count <= 0):
            raise (TypeError if not isinstance(count, int) else ValueError)(
                f"count must be a positive integer (got {count!r})")
        if not isinstance(offset, int) or offset < 0:
            raise (TypeError if not isinstance(offset, int) else ValueError)(
                f"offset must be a non-negative integer (got {offset!r})")

    async def _sock_sendfile_native(self, sock: socket.socket, file: Any, offset: int,
                                    count: int | None) -> int:
        raise asyncio.SendfileNotAvailableError(f"syscall sendfile is not available for {sock!r}")

    async def _sock_sendfile_fallback(self, sock: socket.socket, file: Any, offset: int,
                                      count: int | None) -> int:
        return await self._copy_file(file, offset, count, functools.partial(self.sock_sendall, sock))

    async def _copy_file(self, file: Any, offset: int, count: int | None,
                         send: Callable[[bytes], Awaitable[object]]) -> int:
        """Read ``count`` bytes of ``file`` (all, if None) from ``offset`` in the executor,
        piece by piece, and ``await send(piece)``; return the bytes sent.

        sendfile's fallback, for a socket and for a transport.  The file's
        position ends after the last byte sent, as sendfile(2) leaves it.
        """
        if offset:
            file.seek(offset)
        sent = 0
        try:
            while count is None or sent < count:
                size = SENDFILE_FALLBACK_CHUNK if count is None else min(count - sent,
                                                                         SENDFILE_FALLBACK_CHUNK)
                data = await self.run_in_executor(None, file.read, size)
                if not data:
                    break
                await send(data)
                sent += len(data)
            return sent
        finally:
            if sent:
                file.seek(offset + sent)

    async def sendfile(self, transport: asyncio.WriteTransport, file: Any, offset: int = 0,
                       count: int | None = None, *, fallback: bool = True) -> int:
        """Send a file over ``transport``: zero-copy when the transport allows, else by writes.

        Returns the bytes sent.  Raises RuntimeError if the transport is
        closing, asyncio.SendfileNotAvailableError when only the fallback
        would work and ``fallback`` is False.
        """
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        # Discussion: the fallback writes to a byte stream and pauses its
        # reading meanwhile; a datagram transport (no stream) or a pipe (one
        # direction only) cannot be one.  asyncio refuses them the same
        # way, by their _sendfile_compatible mode, before touching the file.
        if isinstance(transport, asyncio.DatagramTransport) or not (
                hasattr(transport, "write") and hasattr(transport, "pause_reading")):
            raise RuntimeError(f"sendfile is not supported for transport {transport!r}")
        native = getattr(transport, "_sendfile_native", None)
        if native is not None:
            try:
                return await native(file, offset, count)
            except asyncio.SendfileNotAvailableError:
                if not fallback:
                    raise
        elif not fallback:
            raise asyncio.SendfileNotAvailableError(
                f"fallback is disabled and native sendfile is not supported for transport {transport!r}")
        return await self._sendfile_fallback(transport, file, offset, count)

    async def _sendfile_fallback(self, transport: asyncio.WriteTransport, file: Any,
                                 offset: int, count: int | None) -> int:
        """Read the file in the executor and write() it, waiting on the transport's flow control.

        Discussion: only the protocol hears pause_writing/resume_writing, so
        for the duration we put a stand-in protocol in front of the real one
        (FlowControlWaiter): it forwards everything and turns the pause into
        something we can await.
        """
        waiter = _FlowControlWaiter(transport)

        async def write(data: bytes) -> None:
            await waiter.drain()
            transport.write(data)

        try:
            sent = await self._copy_file(file, offset, count, write)
            await waiter.drain()
            return sent
        finally:
            waiter.restore()

    # -- Datagrams ---------------------------------------------------------------------

    async def create_datagram_endpoint(
            self, protocol_factory: Callable[[], asyncio.DatagramProtocol],
            local_addr: Any = None, remote_addr: Any = None, *, family: int = 0, proto: int = 0,
            flags: int = 0, reuse_port: bool | None = None, allow_broadcast: bool | None = None,
            sock: socket.socket | None = None,
    ) -> tuple[asyncio.DatagramTransport, asyncio.DatagramProtocol]:
        """A datagram (UDP, or Unix SOCK_DGRAM) endpoint; return (transport, protocol).

        ``local_addr`` binds, ``remote_addr`` connects (then ``sendto`` needs
        no address); ``allow_broadcast`` sets SO_BROADCAST.  Raises ValueError
        for contradictory arguments, OSError when no address works.  Source:
        the asyncio docs, "Opening network connections".
        """
        if sock is not None:
            if sock.type != socket.SOCK_DGRAM:
                # asyncio's words, which 3.13 changed (a UNIX datagram socket is no UDP one).
                kind = "A datagram socket" if sys.version_info >= (3, 13) else "A UDP Socket"
                raise ValueError(f"{kind} was expected, got {sock!r}")
            if local_addr or remote_addr or family or proto or flags or reuse_port or allow_broadcast:
                raise ValueError("socket modifier keyword arguments can not be used when sock is specified.")
            sock.setblocking(False)
            remote = None
        else:
            if not (local_addr or remote_addr) and family == 0:
                raise ValueError("unexpected address family")
            sock, remote = await self._datagram_socket(local_addr, remote_addr, family, proto,
                                                       flags, reuse_port, allow_broadcast)
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = self._make_datagram_transport(sock, protocol, remote, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    async def _datagram_socket(self, local_addr: Any, remote_addr: Any, family: int, proto: int,
                               flags: int, reuse_port: bool | None,
                               allow_broadcast: bool | None) -> tuple[socket.socket, Any]:
        if family == getattr(socket, "AF_UNIX", None) or not (local_addr or remote_addr):
            # Nothing to resolve: one socket of the family asked for (an unbound
            # one when no address is given; the caller refused family 0 already).
            pairs = [(family, proto, local_addr, remote_addr)]
        else:
            # Every (family, proto) that has both addresses asked for.
            found: dict[tuple[int, int], list[Any]] = {}
            for index, addr in ((0, local_addr), (1, remote_addr)):
                if addr is None:
                    continue
                for info in await self._resolve(*addr, family=family, type=socket.SOCK_DGRAM,
                                                proto=proto, flags=flags):
                    found.setdefault((info[0], info[2]), [None, None])[index] = info[4]
            pairs = [(fam, pro, local, remote) for (fam, pro), (local, remote) in found.items()
                     if not (local_addr and local is None) and not (remote_addr and remote is None)]
            if not pairs:
                raise ValueError("can not get address information")
        error: OSError | None = None
        for fam, pro, local, remote in pairs:
            sock = socket.socket(fam, socket.SOCK_DGRAM, pro)
            try:
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local is not None:
                    sock.bind(local)
                if remote is not None:
                    if not allow_broadcast:
                        await self.sock_connect(sock, remote)
                return sock, remote
            except OSError as exc:
                sock.close()
                error = exc
            except BaseException:
                sock.close()
                raise
        assert error is not None
        raise error

    def _make_server(self, sockets: list[socket.socket],
                     protocol_factory: Callable[[], asyncio.BaseProtocol],
                     ssl_context: ssl_module.SSLContext | None, backlog: int,
                     ssl_handshake_timeout: float | None, ssl_shutdown_timeout: float | None) -> Server:
        """create_server's Server (tinyloop.uv's loop makes one whose clients are kept in C)."""
        return Server(self, sockets, protocol_factory, ssl_context, backlog, ssl_handshake_timeout,
                      ssl_shutdown_timeout)

    # -- Hooks the selector loop supplies ------------------------------------------------

    def _make_socket_transport(self, sock: socket.socket, protocol: asyncio.BaseProtocol,
                               waiter: asyncio.Future | None = None, *,
                               extra: dict[str, Any] | None = None,
                               server: Server | None = None) -> asyncio.Transport:
        raise NotImplementedError

    def _make_datagram_transport(self, sock: socket.socket, protocol: asyncio.BaseProtocol,
                                 address: Any = None, waiter: asyncio.Future | None = None,
                                 extra: dict[str, Any] | None = None) -> asyncio.DatagramTransport:
        raise NotImplementedError

    def _start_serving(self, protocol_factory: Callable[[], asyncio.BaseProtocol],
                       sock: socket.socket, sslcontext: ssl_module.SSLContext | None,
                       server: Server, backlog: int, ssl_handshake_timeout: float | None,
                       ssl_shutdown_timeout: float | None) -> None:
        raise NotImplementedError

    def _stop_serving(self, sock: socket.socket) -> None:
        raise NotImplementedError

    # -- Errors ------------------------------------------------------------------------

    def get_exception_handler(self) -> Callable[..., object] | None:
        """The handler set by :meth:`set_exception_handler`, or None for the default."""
        return self._exception_handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        """Log ``context`` on the "asyncio" logger, as asyncio's does.

        As Part II's, plus asyncio's one special key: ``source_traceback``
        (a list of FrameSummary, recorded in debug mode by a handle, a
        future or a task) is printed as the stack where the object was
        made, not as a repr.
        """
        source = context.get("source_traceback")
        if not source:
            super().default_exception_handler(context)
            return
        rest = {key: value for key, value in context.items() if key != "source_traceback"}
        rest["message"] = rest.get("message") or "Unhandled exception in event loop"
        created = "".join(traceback.format_list(source)).rstrip()
        rest["message"] += f"\nsource_traceback: Object created at (most recent call last):\n{created}"
        super().default_exception_handler(rest)


class _FlowControlWaiter(asyncio.Protocol):
    """Stands in front of a transport's protocol while sendfile's fallback writes.

    Reading is paused for the duration (the file's bytes are the whole
    stream), and the transport's pause_writing/resume_writing become a future
    that :meth:`drain` awaits.  :meth:`restore` puts everything back as it was.
    """

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self._protocol = transport.get_protocol()
        self._loop = asyncio.get_running_loop()
        self._resume_reading = transport.is_reading()  # type: ignore[attr-defined]
        # Already paused: the real protocol heard pause_writing and waits to hear resume.
        self._resume_writing = getattr(transport, "_protocol_paused", False)
        self._resumed: asyncio.Future | None = None
        transport.pause_reading()  # type: ignore[attr-defined]
        transport.set_protocol(self)
        if self._resume_writing:
            self._resumed = self._loop.create_future()

    async def drain(self) -> None:
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        if self._resumed is not None:
            await self._resumed

    def pause_writing(self) -> None:
        if self._resumed is None:
            self._resumed = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._resumed is not None:
            self._resumed.set_result(None)
            self._resumed = None

    def data_received(self, data: bytes) -> None:
        raise RuntimeError("Invalid state: connection should have been paused while sending a file")

    def eof_received(self) -> bool:
        raise RuntimeError("Invalid state: connection should have been paused while sending a file")

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._resumed is not None:
            self._resumed.set_exception(ConnectionError("Connection closed by peer"))
            self._resumed = None
        self._protocol.connection_lost(exc)

    def restore(self) -> None:
        self._transport.set_protocol(self._protocol)
        if self._resume_reading:
            self._transport.resume_reading()  # type: ignore[attr-defined]
        if self._resumed is not None:
            self._resumed.cancel()  # still paused: the real protocol resumes when the transport does
            if not self._resume_writing:
                self._protocol.pause_writing()
        elif self._resume_writing:
            self._protocol.resume_writing()
