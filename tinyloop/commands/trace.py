"""``python -m tinyloop trace``: record a stage under a small load, or any
asyncio program, and write the trace (JSON) and its timeline (HTML).

    python -m tinyloop trace STAGE [--out DIR] [--requests N] [--concurrency C] [--compute-ms MS]
    python -m tinyloop trace --loop aio|uv|ring|asyncio|uvloop SCRIPT [ARGS...]

Rules this file keeps:
  * The server is the only thing in its process.  The stage's server runs
    in the main thread, as under ``serve``; the load comes from a process
    of its own (``python -m tinyloop.commands.load``), which stops the
    server with SIGINT when it is done, as Ctrl-C would.  A load thread
    here would share the server's GIL, and the trace would show callbacks
    waiting for it (commands/load.py says how long).  So the recorder sees
    the server's own loop, made by the stage's own code
    (instrument.for_new_loops), and nothing else.
  * What the recorder itself costs is measured on every run (recorder.
    cost_per_event) and written into the trace, the page and stderr.
  * What was recorded is always written: when the load ends, when the
    script raises (one line on stderr, exit 1), on Ctrl-C (exit 130).  The
    output folder is checked before anything runs, so a path that cannot
    be written fails at once, with one line.  A file already there is
    never overwritten: the new trace takes the next free number
    (``NAME-2.json``).
  * Stages with a loop of ours (Parts II-IV, and Part VI's ring) are
    recorded through their hooks; the readiness servers of Part I have no
    loop object, so their waits are recorded by wrapping select/poll/epoll
    (outside.ReadinessProbe); the baselines have no loop at all, and Part
    VI's raw io_uring servers wait in io_uring_enter, which that wrapping
    cannot see: both are refused, in one line.
  * Output goes to ``traces/`` by default, which git ignores.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tinyloop import stages
from tinyloop.serving import listen
from tinyloop.trace import timeline
from tinyloop.trace.instrument import for_new_loops
from tinyloop.trace.outside import ReadinessProbe
from tinyloop.trace.recorder import DEFAULT_CAPACITY, Recorder, cost_per_event

__all__ = ["HOOKED_CHAPTERS", "LOOPS", "add_arguments", "main", "positive_int", "trace_script",
           "trace_scripts", "trace_stage"]

DEFAULT_OUT = "traces"
LOOPS = ("aio", "uv", "ring", "asyncio", "uvloop")
NO_LOOP = ("blocking", "threaded")   # Part 0: a thread per client, nothing to trace
# The chapters whose stages run on a loop with hooks (Parts II-IV); Part I's
# readiness servers are traced through ReadinessProbe instead.  In Part VI's
# chapter only the stage with a loop (ring) has hooks: the stage table says so.
HOOKED_CHAPTERS = ("callbacks", "generators", "coroutines", "asyncio", "libuv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``trace``, on the subcommand's parser (tinyloop/cli.py)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  python -m tinyloop trace epoll\n"
        "  python -m tinyloop trace uv --requests 50 --concurrency 4 --compute-ms 50\n"
        "  python -m tinyloop trace ring --requests 8 --concurrency 4   (each SQE and CQE too)\n"
        "  python -m tinyloop trace --loop asyncio --loop aio examples/crawler.py -- --quiet\n"
        "each writes NAME.json (Chrome Trace Event Format: Perfetto, chrome://tracing, vizviewer)\n"
        "and NAME.html (a timeline that opens in any browser; drag to pan, wheel to zoom) into --out,\n"
        "as NAME-2.json and so on when NAME.json is there already.\n\n"
        "the load on a stage comes from a process of its own, so the server's process runs\n"
        "nothing else.  The recorder itself costs the loop a few microseconds of CPU per event\n"
        "(2.4 us: the median of 5 runs of tinyloop.trace.recorder.cost_per_event, each the median\n"
        "of 5 timings, on the 2-core machine the book was written on); each run measures it\n"
        "again and prints its figure, with its share of the time the loop spent outside its waits.")
    parser.add_argument("target", help="a stage (python -m tinyloop list), or with --loop a Python script")
    parser.add_argument("args", nargs="*", help="the script's own arguments (with --loop; options of "
                                                "trace go before SCRIPT, and a script argument that "
                                                "starts with - after --)")
    parser.add_argument("--loop", choices=LOOPS, action="append",
                        help="trace SCRIPT, an asyncio program, on this loop; given more than once, "
                             "the script runs on each, and a page shows their timelines side by side")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"folder for the .json and .html (default: ./{DEFAULT_OUT}, which git ignores)")
    parser.add_argument("--requests", type=positive_int, default=20, metavar="N",
                        help="requests to send the stage (default 20)")
    parser.add_argument("--concurrency", type=positive_int, default=2, metavar="C",
                        help="keep-alive connections sending them at once (default 2)")
    parser.add_argument("--compute-ms", type=int, default=0, metavar="MS",
                        help="make the first request /compute?ms=MS, a handler that holds the loop (default 0: none)")
    parser.add_argument("--capacity", type=positive_int, default=DEFAULT_CAPACITY, metavar="EVENTS",
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
        return trace_scripts(args.loop, Path(args.target), args.args, out, args.capacity,
                             command=command_line(args))
    if args.args:
        return _fail(f"unexpected arguments {' '.join(args.args)!r} (a script's arguments need --loop)", 2)
    return trace_stage(args.target, out, requests=args.requests, concurrency=args.concurrency,
                       compute_ms=args.compute_ms, capacity=args.capacity, command=command_line(args))


def command_line(args: argparse.Namespace) -> str:
    """The whole command ``args`` were parsed from, every option spelt out (defaults too)."""
    words = ["python", "-m", "tinyloop", "trace"]
    for loop in dict.fromkeys(args.loop or ()):
        words += ["--loop", loop]
    words += ["--out", str(args.out)]
    if args.loop:
        words += ["--capacity", str(args.capacity), args.target]
        if args.args:
            words += ["--", *args.args]
    else:
        words += [args.target, "--requests", str(args.requests), "--concurrency", str(args.concurrency),
                  "--compute-ms", str(args.compute_ms), "--capacity", str(args.capacity)]
    return shlex.join(words)


# -- a stage under load ----------------------------------------------------------------


def trace_stage(name: str, out: Path, *, requests: int = 20, concurrency: int = 2,
                compute_ms: int = 0, capacity: int = DEFAULT_CAPACITY, command: str | None = None) -> int:
    """Serve stage ``name`` on 127.0.0.1, send it the scripted load from another process, write the trace.

    The files are ``out/NAME.json`` and ``out/NAME.html`` (numbered if
    taken); ``command`` is what the page says made them (default: this
    call as a command line).  Returns the exit status, as :func:`main`.
    """
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
    hooked = stage.chapter in HOOKED_CHAPTERS or stage.loop is not None
    if stage.chapter == "completion" and not hooked:
        return _fail(f"stage {name!r} waits in io_uring_enter, which trace cannot see from outside "
                     "(it wraps select, poll and epoll); try ring, Part VI's loop, whose hooks "
                     "record each SQE and CQE", 2)
    reason = stage.unavailable()
    if reason is not None:
        return _fail(f"stage {name!r} cannot run here: {reason}", 2)
    # A loop names its own track (its class); a readiness server has no loop object to name.
    recorder = Recorder(time.monotonic, capacity=capacity,
                        name=None if hooked else f"{name} server (its waits, seen by wrapping select)")
    sock = listen("127.0.0.1", 0)
    status = 0
    probe = None if hooked else ReadinessProbe(recorder)
    # Discussion: asyncio's Runner (and so tinyloop.aio's and uv's), and
    # Part II's tasks.run, turn a SIGINT into a clean cancel only while the
    # handler is Python's default, so the load stops the server with that
    # same SIGINT, as Ctrl-C would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    load = None
    try:
        # Its own session: a Ctrl-C typed at the terminal reaches the server, not the load.
        load = subprocess.Popen(
            [sys.executable, "-m", "tinyloop.commands.load", str(sock.getsockname()[1]), str(requests),
             str(concurrency), str(compute_ms), "--stop", str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_root(), os.environ.get("PYTHONPATH")]))})
        with for_new_loops(recorder), (probe.installed() if probe else _nothing()):
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
        answer = _finish(load)
        if status == 0 and not answer.isdigit():
            # The server stopped before the load was done: a Ctrl-C (the
            # load then finds its connections closed), or the load failed.
            if not answer or answer.startswith("closed:"):
                status = 130
            else:
                print(f"tinyloop: the load on {name!r} failed: {answer.removeprefix('error: ')}", file=sys.stderr)
                status = 1
        load_text = f"{requests} requests over {concurrency} connections from another process"
        if compute_ms:
            load_text += f", the first /compute?ms={compute_ms}"
        if command is None:
            command = command_line(argparse.Namespace(loop=None, out=out, target=name, args=[], requests=requests,
                                                      concurrency=concurrency, compute_ms=compute_ms,
                                                      capacity=capacity))
        written = _write(recorder, out, name, f"{name}: {load_text}", command)
    finally:
        signal.signal(signal.SIGINT, previous)
    return written if written else status


def _finish(load: subprocess.Popen[str] | None) -> str:
    """The load process's last line (a count of answers, ``closed: ...`` or ``error: ...``), once it has exited.

    A load still running (the server stopped first: a Ctrl-C) is killed: "" then.
    """
    if load is None:
        return ""
    try:
        # It signals when it is done, so it is exiting now; if it is not (a Ctrl-C
        # stopped the server first), its requests fail within moments.
        output, _ = load.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        output = ""
    if load.poll() is None or load.returncode < 0:
        load.kill()
        load.communicate()
        return ""
    lines = (output or "").strip().splitlines()
    return lines[-1] if lines else ""


def _root() -> str:
    """The folder tinyloop is imported from, for the load's process."""
    return str(Path(__file__).resolve().parents[2])


# -- any asyncio program -------------------------------------------------------------------


def trace_scripts(loop_names: list[str], script: Path, argv: list[str], out: Path,
                  capacity: int = DEFAULT_CAPACITY, *, command: str | None = None) -> int:
    """:func:`trace_script` on each loop of ``loop_names``; with two or more, also a side-by-side page.

    Returns the first non-zero status, else 0.  The page,
    ``out/SCRIPT-side-by-side.html`` (numbered if taken), stacks the loops'
    timelines, each with what its recording cannot show.  ``command`` is
    what each page says made it (default: this call as a command line).
    """
    if command is None:
        command = command_line(argparse.Namespace(loop=loop_names, out=out, target=str(script), args=argv,
                                                  capacity=capacity))
    from tinyloop.trace.outside import CANNOT_RECORD
    statuses, sections = [], []
    for loop_name in dict.fromkeys(loop_names):  # each once, in the order given
        traces: list[dict[str, Any]] = []
        statuses.append(trace_script(loop_name, script, argv, out, capacity, keep=traces, command=command))
        if traces:
            note = CANNOT_RECORD.get(loop_name)
            sections.append((loop_name, traces[0], f"Not recorded on {loop_name}: {note}." if note else ""))
    if len(sections) > 1:
        try:
            path = timeline.write_side_by_side(sections, out / f"{_free(out, f'{script.stem}-side-by-side')}.html",
                                               title=f"tinyloop trace: {script.name}, side by side",
                                               command=command)
        except OSError as error:
            return _fail(f"cannot write the trace into {out}: {error.strerror or error}", 1)
        print(f"tinyloop: wrote {path}", file=sys.stderr)
    return next((status for status in statuses if status), 0)


def trace_script(loop_name: str, script: Path, argv: list[str], out: Path,
                 capacity: int = DEFAULT_CAPACITY, *, keep: list[dict[str, Any]] | None = None,
                 command: str | None = None) -> int:
    """Run ``script`` as ``__main__`` with asyncio's loops made by ``loop_name``; write its trace.

    aio, uv and ring are recorded through their hooks.  stdlib asyncio and uvloop
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
    if command is None:
        command = command_line(argparse.Namespace(loop=[loop_name], out=out, target=str(script), args=argv,
                                                  capacity=capacity))
    written = _write(recorder, out, name, f"{script.name} on {loop_name}", command, keep=keep)
    return written if written else status


def _policy(loop_name: str, recorder: Recorder) -> Any:
    if loop_name == "aio":
        from tinyloop import aio
        return aio.EventLoopPolicy()
    if loop_name == "uv":
        from tinyloop import uv
        return uv.EventLoopPolicy()
    if loop_name == "ring":
        from tinyloop import ring   # (its names raise ImportError, saying why, where io_uring is refused)
        return ring.EventLoopPolicy()
    from tinyloop.trace import outside
    return outside.policy(loop_name, recorder)


# -- helpers ---------------------------------------------------------------------------


def _write(recorder: Recorder, out: Path, name: str, title: str, command: str, *,
           keep: list[dict[str, Any]] | None = None) -> int:
    """Write ``out/NAME.json`` and ``out/NAME.html`` (``NAME-2``... if taken); say where.

    The trace's ``otherData.recorder_cost`` says what the recorder cost the
    loop, measured now (:func:`~tinyloop.trace.recorder.cost_per_event`).
    The trace is appended to ``keep`` when given.  Returns 0, or 1 with a
    line on stderr.
    """
    from tinyloop.trace import chrome
    trace = recorder.trace()
    per_event = cost_per_event()
    trace["otherData"]["recorder_cost"] = {
        "seconds_per_event": per_event, "events": recorder.recorded,
        "seconds": per_event * recorder.recorded, "busy_seconds": _busy(trace) / 1e6,
        "measured_by": "tinyloop.trace.recorder.cost_per_event: median of 5 timings"}
    if keep is not None:
        keep.append(trace)
    stem = _free(out, name)
    try:
        json_path = chrome.write(trace, out / f"{stem}.json")
        html_path = timeline.write_html(trace, out / f"{stem}.html", title=f"tinyloop trace: {title}",
                                        command=command)
    except OSError as error:
        return _fail(f"cannot write the trace into {out}: {error.strerror or error}", 1)
    dropped = f", {recorder.dropped} older dropped" if recorder.dropped else ""
    print(f"tinyloop: {len(recorder.events)} events{dropped}: wrote {json_path} and {html_path}",
          file=sys.stderr)
    print(f"tinyloop: {timeline.cost_sentence(trace)}", file=sys.stderr)
    return 0


def _busy(trace: dict[str, Any]) -> float:
    """Microseconds the loop's track spent outside its waits, from its first event to its last."""
    from tinyloop.trace.recorder import LOOP_TID
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("tid") == LOOP_TID]
    if not spans:
        return 0.0
    length = max(e["ts"] + e["dur"] for e in spans) - min(e["ts"] for e in spans)
    return max(0.0, length - sum(e["dur"] for e in spans if e["name"] == "wait"))


def _free(out: Path, name: str) -> str:
    """``name``, or ``name-2``, ``name-3``...: the first stem with no .json or .html in ``out``."""
    for stem in itertools.chain([name], (f"{name}-{n}" for n in itertools.count(2))):
        if not (out / f"{stem}.json").exists() and not (out / f"{stem}.html").exists():
            return stem
    raise AssertionError("unreachable")


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


def positive_int(text: str) -> int:
    """argparse type for a count (``--requests``, ``serve --workers``): a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
