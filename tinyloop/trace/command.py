"""``python -m tinyloop trace``: record a stage under a small load, or any
asyncio program, and write the trace (JSON) and its timeline (HTML).

    python -m tinyloop trace STAGE [--out DIR] [--requests N] [--concurrency C] [--compute-ms MS]
    python -m tinyloop trace --loop aio|uv|asyncio|uvloop SCRIPT [ARGS...]

Rules this file keeps:
  * In-process.  The stage's server runs in the main thread, as under
    ``serve``; a second thread sends the load on 127.0.0.1 and, when it is
    done, interrupts the server with SIGINT, which every stage already
    treats as its end.  So the recorder sees the server's own loop, made
    by the stage's own code (instrument.for_new_loops).
  * What was recorded is always written: when the load ends, when the
    script raises (one line on stderr, exit 1), on Ctrl-C (exit 130).  The
    output folder is checked before anything runs, so a path that cannot
    be written fails at once, with one line.
  * Stages with a loop of ours (Parts II-IV) are recorded through their
    hooks; the readiness servers of Part I have no loop object, so their
    waits are recorded by wrapping select/poll/epoll (ReadinessProbe);
    the baselines have no loop at all and are refused.
  * Output goes to ``traces/`` by default, which git ignores.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
import contextlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinyloop import stages
from tinyloop.serving import listen
from tinyloop.trace import timeline
from tinyloop.trace.instrument import for_new_loops
from tinyloop.trace.recorder import DEFAULT_CAPACITY, Recorder

__all__ = ["LOOPS", "ReadinessProbe", "add_arguments", "main", "scripted_load"]

DEFAULT_OUT = "traces"
LOOPS = ("aio", "uv", "asyncio", "uvloop")
NO_LOOP = ("blocking", "threaded")   # Part 0: a thread per client, nothing to trace
# The chapters whose stages run on a loop with hooks (Parts II-IV); Part I's
# readiness servers are traced through ReadinessProbe instead.
HOOKED_CHAPTERS = ("callbacks", "generators", "coroutines", "asyncio", "libuv")
LOAD_TIMEOUT = 30.0                  # seconds for the whole scripted load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``trace``, on the subcommand's parser (tinyloop/cli.py)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  python -m tinyloop trace epoll\n"
        "  python -m tinyloop trace uv --requests 50 --concurrency 4 --compute-ms 50\n"
        "  python -m tinyloop trace --loop asyncio --loop aio examples/crawler.py -- --quiet\n"
        "each writes NAME.json (Chrome Trace Event Format: Perfetto, chrome://tracing, vizviewer)\n"
        "and NAME.html (a timeline that opens in any browser) into --out")
    parser.add_argument("target", help="a stage (python -m tinyloop list), or with --loop a Python script")
    parser.add_argument("args", nargs="*", help="the script's own arguments (with --loop; options of "
                                                "trace go before SCRIPT, and a script argument that "
                                                "starts with - after --)")
    parser.add_argument("--loop", choices=LOOPS, action="append",
                        help="trace SCRIPT, an asyncio program, on this loop; given more than once, "
                             "the script runs on each, and a page shows their timelines side by side")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"folder for the .json and .html (default: ./{DEFAULT_OUT}, which git ignores)")
    parser.add_argument("--requests", type=_positive, default=20, metavar="N",
                        help="requests to send the stage (default 20)")
    parser.add_argument("--concurrency", type=_positive, default=2, metavar="C",
                        help="keep-alive connections sending them at once (default 2)")
    parser.add_argument("--compute-ms", type=int, default=0, metavar="MS",
                        help="make the first request /compute?ms=MS, a handler that holds the loop (default 0: none)")
    parser.add_argument("--capacity", type=_positive, default=DEFAULT_CAPACITY, metavar="EVENTS",
                        help=f"ring buffer size: the last EVENTS events are kept (default {DEFAULT_CAPACITY})")


def main(args: argparse.Namespace) -> int:
    """Run ``trace`` as parsed by :func:`add_arguments`; return the exit status.

    0: written; 1: the traced code failed or the files could not be written
    (the trace is written if it can be); 2: bad arguments (an unknown stage,
    a stage with no loop, a missing script); 130: interrupted by Ctrl-C.
    """
    out = Path(args.out)
    problem = _unwritable(out)
    if problem:
        return _fail(f"cannot write traces into {out}: {problem}", 1)
    if args.loop:
        return trace_scripts(args.loop, Path(args.target), args.args, out, args.capacity)
    if args.args:
        return _fail(f"unexpected arguments {' '.join(args.args)!r} (a script's arguments need --loop)", 2)
    return trace_stage(args.target, out, requests=args.requests, concurrency=args.concurrency,
                       compute_ms=args.compute_ms, capacity=args.capacity)


# -- a stage under load ----------------------------------------------------------------


def trace_stage(name: str, out: Path, *, requests: int = 20, concurrency: int = 2,
                compute_ms: int = 0, capacity: int = DEFAULT_CAPACITY) -> int:
    """Serve stage ``name`` on 127.0.0.1, send it the scripted load, write ``out/NAME.{json,html}``."""
    try:
        stage = stages.get(name)
        module = stages.load(name)
    except KeyError as error:
        return _fail(error.args[0], 2)
    except ImportError as error:
        return _fail(f"stage {name!r} cannot run here: {error}", 2)
    if name in NO_LOOP:
        return _fail(f"stage {name!r} has no event loop to trace (a blocking server); "
                     "try a readiness stage (epoll) or a loop (callbacks, aio, uv)", 2)
    recorder = Recorder(time.monotonic, capacity=capacity)
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    outcome: dict[str, Any] = {}
    main_thread = threading.get_ident()

    def load() -> None:
        try:
            outcome["responses"] = scripted_load("127.0.0.1", port, requests, concurrency, compute_ms)
        except BaseException as error:  # reported by the main thread
            outcome["error"] = error
        finally:
            signal.pthread_kill(main_thread, signal.SIGINT)  # the server's way to stop

    status = 0
    probe = ReadinessProbe(recorder) if stage.chapter not in HOOKED_CHAPTERS else None
    # Discussion: asyncio's Runner (and so tinyloop.aio's and uv's) turns a
    # SIGINT into a clean cancel only while the handler is Python's default,
    # so the load stops the server with that same SIGINT, as Ctrl-C would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    loader = threading.Thread(target=load, name="tinyloop-trace-load", daemon=True)
    try:
        with for_new_loops(recorder), (probe.installed() if probe else _nothing()):
            loader.start()
            try:
                module.serve(sock)
            except KeyboardInterrupt:
                pass
    except KeyboardInterrupt:
        pass
    except Exception as error:
        print(f"tinyloop: stage {name!r} failed: {type(error).__name__}: {error}", file=sys.stderr)
        status = 1
    finally:
        # The load's SIGINT may still come (after a Ctrl-C, when its requests
        # fail): it must not cut the writing short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sock.close()
    try:
        loader.join(timeout=5)
        if status == 0 and "responses" not in outcome:
            # The server stopped before the load was done: a Ctrl-C (the
            # load then finds its connections closed), or the load failed.
            error = outcome.get("error")
            if error is None or isinstance(error, ConnectionError):
                status = 130
            else:
                print(f"tinyloop: the load on {name!r} failed: {type(error).__name__}: {error}",
                      file=sys.stderr)
                status = 1
        load_text = f"{requests} requests over {concurrency} connections"
        if compute_ms:
            load_text += f", the first /compute?ms={compute_ms}"
        command = f"python -m tinyloop trace {name} --requests {requests} --concurrency {concurrency}" + (
            f" --compute-ms {compute_ms}" if compute_ms else "")
        written = _write(recorder, out, name, f"{name}: {load_text}", command)
    finally:
        signal.signal(signal.SIGINT, previous)
    return written if written else status


def scripted_load(host: str, port: int, requests: int, concurrency: int, compute_ms: int = 0,
                  timeout: float = LOAD_TIMEOUT) -> int:
    """Send ``requests`` GETs over ``concurrency`` keep-alive connections; return how many got 200.

    Connection 0's first request is ``/compute?ms=COMPUTE_MS`` when that is
    above 0, the others ``/``.  Each connection sends its share one after
    the other (HTTP/1.1, http.client).  Raises OSError or
    http.client.HTTPException if the server fails, TimeoutError past
    ``timeout`` seconds.
    """
    import http.client
    counts = [0] * concurrency
    errors: list[BaseException] = []
    shares = [requests // concurrency + (1 if i < requests % concurrency else 0) for i in range(concurrency)]

    def client(index: int) -> None:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            for number in range(shares[index]):
                path = f"/compute?ms={compute_ms}" if compute_ms and index == 0 and number == 0 else "/"
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                counts[index] += response.status == 200
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise TimeoutError(f"the load did not finish in {timeout} s")
    if errors:
        raise errors[0]
    return sum(counts)


class ReadinessProbe:
    """Records the waits of Part I's servers, which have no loop object, by wrapping select(2) and friends.

    Inside :meth:`installed`, ``select.select``, ``select.poll()`` and
    ``select.epoll()`` hand out wrappers that time each call and count what
    it returned: the loop track gets a ``wait`` span per call (timeout in
    seconds, events ready) and a ``handle events`` span for the work
    between two waits, and the ``ready descriptors`` counter.  What a
    server does inside that work (which socket, how many bytes) is not seen.
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._after: float | None = None   # when the last wait returned

    def wait(self, call: Callable[[], Any], timeout: float | None, count: Callable[[Any], int]) -> Any:
        recorder = self.recorder
        start = recorder.now()
        if self._after is not None:
            recorder.span("handle events", self._after, start)
        result = call()
        end = recorder.now()
        ready = count(result)
        recorder.span("wait", start, end, args={"timeout": timeout, "events": ready})
        recorder.counter("ready descriptors", end, events=ready)
        self._after = end
        return result

    @contextmanager
    def installed(self) -> Iterator[None]:
        """While the ``with`` block runs, ``select``'s three waits are the wrapped ones."""
        import select
        originals = {name: getattr(select, name) for name in ("select", "poll", "epoll") if hasattr(select, name)}
        probe = self

        def traced_select(rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
            return probe.wait(lambda: originals["select"](rlist, wlist, xlist, timeout), timeout,
                              lambda r: len(r[0]) + len(r[1]) + len(r[2]))

        class _Traced:
            def __init__(self, inner: Any, milliseconds: bool) -> None:
                self._inner, self._ms = inner, milliseconds

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

            def poll(self, timeout: Any = None, *args: Any) -> Any:
                seconds = None if timeout is None or timeout < 0 else timeout / 1000 if self._ms else timeout
                return probe.wait(lambda: self._inner.poll(timeout, *args), seconds, len)

            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: Any) -> None:
                self._inner.close()

        select.select = traced_select
        if "poll" in originals:
            select.poll = lambda: _Traced(originals["poll"](), True)  # type: ignore[assignment]
        if "epoll" in originals:
            select.epoll = lambda *a, **k: _Traced(originals["epoll"](*a, **k), False)  # type: ignore[assignment]
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(select, name, original)


# -- any asyncio program -------------------------------------------------------------------


def trace_scripts(loop_names: list[str], script: Path, argv: list[str], out: Path,
                  capacity: int = DEFAULT_CAPACITY) -> int:
    """:func:`trace_script` on each loop of ``loop_names``; with two or more, also a side-by-side page.

    Returns the first non-zero status, else 0.  The page,
    ``out/SCRIPT-side-by-side.html``, stacks the loops' timelines, each with
    what its recording cannot show.
    """
    from tinyloop.trace.outside import CANNOT_RECORD
    statuses, sections = [], []
    for loop_name in dict.fromkeys(loop_names):  # each once, in the order given
        traces: list[dict[str, Any]] = []
        statuses.append(trace_script(loop_name, script, argv, out, capacity, keep=traces))
        if traces:
            note = CANNOT_RECORD.get(loop_name)
            sections.append((loop_name, traces[0], f"Not recorded on {loop_name}: {note}." if note else ""))
    if len(sections) > 1:
        loops = " ".join(f"--loop {name}" for name, _, _ in sections)
        try:
            path = timeline.write_side_by_side(sections, out / f"{script.stem}-side-by-side.html",
                                               title=f"tinyloop trace: {script.name}, side by side",
                                               command=f"python -m tinyloop trace {loops} {script}")
        except OSError as error:
            return _fail(f"cannot write the trace into {out}: {error.strerror or error}", 1)
        print(f"tinyloop: wrote {path}", file=sys.stderr)
    return next((status for status in statuses if status), 0)


def trace_script(loop_name: str, script: Path, argv: list[str], out: Path,
                 capacity: int = DEFAULT_CAPACITY, *, keep: list[dict[str, Any]] | None = None) -> int:
    """Run ``script`` as ``__main__`` with asyncio's loops made by ``loop_name``; write its trace.

    aio and uv are recorded through their hooks.  stdlib asyncio and uvloop
    have none: they are recorded from outside (tinyloop/trace/outside.py,
    which says what that misses).  The trace is also appended to ``keep``
    when given.
    """
    import asyncio
    import runpy
    if not script.is_file():
        return _fail(f"no such script: {script}", 2)
    recorder = Recorder(time.monotonic, capacity=capacity)
    try:
        policy = _policy(loop_name, recorder)
    except ImportError as error:
        return _fail(f"cannot trace on {loop_name}: {error}", 2)
    old_policy = asyncio.get_event_loop_policy()
    old_argv = sys.argv
    status = 0
    asyncio.set_event_loop_policy(policy)
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.resolve().parent))  # as `python SCRIPT` does
    try:
        with for_new_loops(recorder):
            runpy.run_path(str(script), run_name="__main__")
    except KeyboardInterrupt:
        status = 130
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException as error:
        print(f"tinyloop: {script} raised {type(error).__name__}: {error}", file=sys.stderr)
        status = 1
    finally:
        sys.argv = old_argv
        with contextlib.suppress(ValueError):
            sys.path.remove(str(script.resolve().parent))
        asyncio.set_event_loop_policy(old_policy)
    name = f"{script.stem}-{loop_name}"
    written = _write(recorder, out, name, f"{script.name} on {loop_name}",
                     f"python -m tinyloop trace --loop {loop_name} {script}")
    if keep is not None:
        keep.append(recorder.trace())
    return written if written else status


def _policy(loop_name: str, recorder: Recorder) -> Any:
    if loop_name == "aio":
        from tinyloop import aio
        return aio.EventLoopPolicy()
    if loop_name == "uv":
        from tinyloop import uv
        return uv.EventLoopPolicy()
    from tinyloop.trace import outside
    return outside.policy(loop_name, recorder)


# -- helpers ---------------------------------------------------------------------------


def _write(recorder: Recorder, out: Path, name: str, title: str, command: str) -> int:
    """Write ``out/NAME.json`` and ``out/NAME.html``; say where.  0, or 1 with a line on stderr."""
    trace = recorder.trace()
    try:
        json_path = recorder.write(out / f"{name}.json")
        html_path = timeline.write_html(trace, out / f"{name}.html", title=f"tinyloop trace: {title}",
                                        command=command)
    except OSError as error:
        return _fail(f"cannot write the trace into {out}: {error.strerror or error}", 1)
    dropped = f", {recorder.dropped} older dropped" if recorder.dropped else ""
    print(f"tinyloop: {len(recorder.events)} events{dropped}: wrote {json_path} and {html_path}",
          file=sys.stderr)
    return 0


def _unwritable(out: Path) -> str | None:
    """Why ``out`` cannot take our files (made if missing), or None."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return error.strerror or str(error)
    if not os.access(out, os.W_OK | os.X_OK):
        return "permission denied"
    return None


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _fail(message: str, status: int) -> int:
    print(f"tinyloop: {message}", file=sys.stderr)
    return status


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
