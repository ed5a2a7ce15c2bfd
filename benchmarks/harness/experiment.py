# benchmarks/harness/experiment.py
"""What every experiment does around its own measurement: the shared command line
(:func:`parser`), interleaved repetitions, the one fold of records into medians with spread,
noise and ratios (:func:`fold`), the JSON's head (:func:`document`), and the end of a run
(:func:`finish`).  benchmarks/README.md gives the rules these keep.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.harness import output
from benchmarks.harness.machine import display, fingerprint
from benchmarks.harness.process import choose_pinning
from benchmarks.harness.summary import NOISE, is_noisy, median
from tinyloop import serving

__all__ = ["SCHEMA", "Clock", "ExperimentParser", "conclude", "document", "finish", "fold", "interleave", "interrupt", "least", "parser",
           "pinning", "prepared", "require", "run_tool", "sentence", "settings"]

SCHEMA = 1  # every experiment's JSON carries it; the book's directives and benchmarks.report read it


class ExperimentParser(argparse.ArgumentParser):
    """An experiment's command line, whose accepted parse is the start of a run.

    ``parse_args`` (and ``parse_known_args``, which it calls) then makes SIGTERM
    raise KeyboardInterrupt, as Ctrl-C does, so that the ``finally`` blocks stop
    the servers the run starts; a parser only built (a test, ``--help``, a
    refused option) leaves the process's handlers as they were.
    """

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        parsed = super().parse_known_args(*args, **kwargs)
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # not over pytest's own handler
            with contextlib.suppress(ValueError):  # ValueError: not the main thread, nothing to stop
                serving.stop_on_sigterm()
        return parsed


def parser(name: str, doc: str | None, *, repeat: int | None = 3, pin: bool = True,
           results: str | None = None) -> argparse.ArgumentParser:
    """The shared command line of ``python -m benchmarks.NAME``.

    ``--quick`` (a smoke run, never the reference), ``--repeat`` when the
    experiment repeats (default ``repeat``; None: no such option), ``--no-pin``
    and ``--no-realtime`` when it pins (``pin``; see :func:`pinning`), and the
    output rule's ``--reference`` and ``--out`` (``results`` names the JSON,
    default NAME.json).  Building it changes nothing else; its ``parse_args``
    starts the run (see :class:`ExperimentParser`).
    """
    made = ExperimentParser(prog=f"python -m benchmarks.{name}", description=doc,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--quick", action="store_true",
                      help="a smoke run: small, one repetition, short time-outs; not a measurement")
    if repeat is not None:
        made.add_argument("--repeat", type=int, default=None,
                          help=f"repetitions, interleaved (default {repeat}; --quick 1)")
    if pin:
        made.add_argument("--no-pin", action="store_true",
                          help="do not pin server and load generator to separate CPUs")
        made.add_argument("--no-realtime", action="store_true",
                          help="do not run them at real-time priority (chrt -f 1) where allowed")
    output.add_arguments(made, results or f"{name}.json")
    return made


def pinning(args: argparse.Namespace) -> dict:
    """The pinning :func:`parser`'s options ask for: separate CPUs, at real-time priority where allowed."""
    return choose_pinning(args.no_pin, realtime=not args.no_realtime)


def settings(parser: argparse.ArgumentParser, args: argparse.Namespace, defaults: dict,
             quick: dict, least: dict[str, float] | None = None) -> dict:
    """Each key of ``defaults``: the option of that name (``-`` read as ``_``) where the command line
    gives it, else ``quick``'s value (where it has one) with ``--quick``, else the default.  A number
    under its ``least`` (default: any positive number) is refused through ``parser.error`` (exit 2)."""
    chosen = {}
    for key, default in defaults.items():
        given = getattr(args, key.replace("-", "_"), None)
        chosen[key] = given if given is not None else quick.get(key, default) if args.quick else default
        value, floor = chosen[key], (least or {}).get(key)
        if type(value) in (int, float) and (value < floor if floor is not None else value <= 0):
            parser.error(f"--{key.replace('_', '-')} must be {'positive' if floor is None else f'at least {floor:g}'}"
                         f", got {value:g}")
    return chosen


def require(name: str, *tools: str) -> None:
    """Exit (SystemExit, naming experiment ``name``) unless every command of ``tools`` is on PATH."""
    if missing := [tool for tool in tools if shutil.which(tool) is None]:
        packages = " ".join(dict.fromkeys(_PACKAGES.get(tool, tool) for tool in missing))
        raise SystemExit(f"{name}: {' and '.join(missing)} not found; install them (Debian: apt-get install "
                         f"{packages}) or run `bash scripts/setup.sh`")


_PACKAGES = {"ab": "apache2-utils", "taskset": "util-linux", "chrt": "util-linux"}  # Debian's, where not the name


def prepared(candidates: Sequence, prepare: Callable[[Any], str | None],
             name: str | None = None) -> tuple[list, dict[str, str]]:
    """``(ready, skipped)``: ``prepare(candidate)`` says None (ready) or why not for each of ``candidates``
    (named by ``.name``, or names); ``skipped`` is {name: why}, each printed as a skip line.  With
    ``name`` (the experiment's), exits (SystemExit) when none is ready."""
    ready, skipped = [], {}
    for candidate in candidates:
        if note := prepare(candidate):
            skipped[getattr(candidate, "name", candidate)] = note
            print(f"skip {getattr(candidate, 'name', candidate)}: {note}", flush=True)
        else:
            ready.append(candidate)
    if name and not ready:
        raise SystemExit(f"{name}: nothing can run here")
    return ready, skipped


def least(figures: dict[str, float | None], baseline: str | None, digits: int, among: Iterable[str] | None = None,
          unit: str = " µs") -> str | None:
    """``"uv 13 µs, asyncio-protocol 16"``: the least of ``figures`` (of the names ``among``, default
    all), then the ``baseline``'s where it has one, ``digits`` after the point; None without any."""
    measured = {name: value for name, value in figures.items() if value is not None}
    pool = [name for name in (measured if among is None else among) if name in measured]
    if not pool:
        return None
    best = min(pool, key=measured.__getitem__)
    against = f", {baseline} {measured[baseline]:.{digits}f}" if baseline in measured else ""
    return f"{best} {measured[best]:.{digits}f}{unit}{against}"


def sentence(head: str, parts: Sequence[str], empty: str | None = None, sep: str = ", ") -> str:
    """A conclusion: ``"HEAD: part, part"``; without parts ``empty`` (default ``"HEAD: nothing measured"``)."""
    return f"{head}: {sep.join(parts)}" if parts else (empty or f"{head}: nothing measured")


class Clock:
    """When a run started, in UTC and on the monotonic clock, and the machine's load then."""

    def __init__(self) -> None:
        self.date = datetime.now(timezone.utc)
        self.started = time.monotonic()
        self.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 1)


def interleave(cells: Sequence, repeat: int, measure: Callable[..., dict],
               label: Callable[..., str], show: Callable[[dict], str]) -> list[dict]:
    """Run ``measure(cell)`` for every cell, ``repeat`` times, interleaved (drift on the machine spreads
    over every cell); returns the records, each with its ``rep``.  A progress line per run shows
    ``label(cell)`` and ``show(record)`` for an ``"ok"`` record, else its status and note."""
    records: list[dict] = []
    total = len(cells) * repeat
    for rep in range(1, repeat + 1):
        for cell in cells:
            record = {"rep": rep, **measure(cell)}
            records.append(record)
            what = (show(record) if record.get("status") == "ok"
                    else f"{str(record.get('status')).upper()}: {record.get('note')}")
            print(f"[{len(records):>{len(str(total))}}/{total}] rep {rep} {label(cell)} ... {what}", flush=True)
    return records


def fold(records: Iterable[dict], group: str, row: str, figures: Sequence[str], *,
         deciding: Sequence[str] = (), baseline: str | None = None,
         ratios: Sequence[str] | None = None) -> dict[str, dict[str, dict]]:
    """Fold run records into ``{str(record[group]): {str(record[row]): summary}}``, in first-seen order.

    A summary holds ``runs``, ``ok_runs``, each of ``figures`` as the median
    over the ``"ok"`` records (None without any), ``spread`` {figure: [min,
    max]}, ``noisy`` (two ok runs or more, and a ``deciding`` figure's spread
    wider than NOISE), ``failed`` (the sum of the records' ``failed``, where
    they count failures), ``status`` (``"ok"`` when every run was, the failed
    runs' status when none was, else ``"partial"``), ``note`` (how many runs
    failed, and their notes) and ``ratio`` {figure: median / the ``baseline``
    row's median in the same group, for each of ``ratios``, default every
    figure} (None where either is missing).
    """
    grouped: dict[str, dict[str, list[dict]]] = {}
    for record in records:
        grouped.setdefault(str(record[group]), {}).setdefault(str(record[row]), []).append(record)
    out: dict[str, dict[str, dict]] = {}
    for key, by_row in grouped.items():
        rows: dict[str, dict] = {}
        for name, runs in by_row.items():
            ok = [run for run in runs if run.get("status") == "ok"]
            bad = [run for run in runs if run.get("status") != "ok"]
            summary: dict = {"runs": len(runs), "ok_runs": len(ok)}
            summary.update({figure: median(run.get(figure) for run in ok) for figure in figures})
            values = {figure: [run[figure] for run in ok if run.get(figure) is not None] for figure in figures}
            summary["spread"] = {figure: [min(v), max(v)] if v else None for figure, v in values.items()}
            summary["noisy"] = len(ok) >= 2 and any(is_noisy(summary["spread"][f]) for f in deciding)
            failed = [run["failed"] for run in runs if run.get("failed") is not None]
            summary["failed"] = sum(failed) if failed else None
            summary["status"] = "ok" if not bad else ("partial" if ok else bad[0]["status"])
            notes = sorted({run["note"] for run in bad if run.get("note")})
            summary["note"] = (f"{len(bad)} of {len(runs)} runs: {', '.join(sorted({r['status'] for r in bad}))}"
                               + (f" ({'; '.join(notes)})" if notes else "")) if bad else None
            rows[name] = summary
        base = rows.get(baseline) if baseline else None
        for summary in rows.values():
            summary["ratio"] = {figure: (summary[figure] / base[figure]
                                         if base and summary[figure] is not None and base[figure] else None)
                                for figure in (figures if ratios is None else ratios)}
        out[key] = rows
    return out


def document(name: str, argv: Sequence[str] | None, clock: Clock, *, settings: dict,
             pinning: dict | None = None, tools: dict | None = None, **fields: Any) -> dict:
    """The head every experiment's JSON starts with, then the experiment's own ``fields``.

    ``schema``, ``date`` (ISO 8601, UTC), ``command`` (as a reader types it;
    ``argv`` None: this process's), ``machine`` (the fingerprint), ``tools``
    (version lines), ``pinning`` (without the command prefixes), ``settings``
    (with ``noise``), and ``load_average`` [at start, now]: the other work on
    a shared machine.
    """
    argv = sys.argv[1:] if argv is None else argv
    load = [clock.load, os.getloadavg()[0]] if clock.load is not None else None
    return {
        "schema": SCHEMA,
        "date": clock.date.isoformat(timespec="seconds"),
        "command": display(["python", "-m", f"benchmarks.{name}", *argv]),
        "machine": fingerprint(),
        "tools": tools or {},
        "pinning": {key: value for key, value in (pinning or {}).items() if not key.endswith("_prefix")},
        "settings": {**settings, "noise": NOISE},
        "load_average": [round(value, 2) for value in load] if load else None,
        **fields,
    }


def finish(data: dict, out: Path, text: str, conclusion: str, *, extra: dict[Path, str] | None = None,
           keep_copy: bool = False) -> None:
    """Write ``data`` to ``out`` (and each ``extra`` path's text), print ``text``, where it went,
    and the one-line ``conclusion`` last."""
    data.setdefault("conclusion", conclusion)
    written = [output.write_json(data, out, keep_copy=keep_copy)]
    for path, content in (extra or {}).items():
        written.append(output.write_text(content, path))
    print()
    print(text.rstrip("\n"))
    took = f" in {output.minutes(data['elapsed_s'])}" if data.get("elapsed_s") is not None else ""
    print(f"\nwrote {', '.join(output.relative(path) for path in written)}{took}")
    if out.parent.resolve() == output.RESULTS.resolve():
        print(f"this is the book's reference now: commit {', '.join(output.relative(p) for p in written)}")
    print(conclusion, flush=True)


def conclude(data: dict, out: Path, clock: Clock | None, render: Callable[[dict], str],
             conclusion: Callable[[dict], str], suffix: str | None = ".txt", *, keep_copy: bool = False) -> int:
    """The end of a run: ``elapsed_s`` from ``clock`` (None: as ``data`` has it), then :func:`finish` with
    ``render(data)`` printed and written beside ``out`` with ``suffix`` (None: not written) and
    ``conclusion(data)`` last; returns 0, the command's exit status."""
    if clock is not None:
        data["elapsed_s"] = clock.elapsed()
    text = render(data)
    finish(data, out, text, conclusion(data), extra={out.with_suffix(suffix): text} if suffix else None,
           keep_copy=keep_copy)
    return 0


def run_tool(argv: Sequence[str], limit: float) -> tuple[int | None, str]:
    """Run a load generator; ``(exit code, or None past the wall-clock ``limit`` in seconds, its output)``.
    Past the limit :func:`interrupt` stops it; it runs in its own session, so a Ctrl-C reaches the
    harness, which kills it."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        try:
            out = proc.communicate(timeout=limit)[0]
            return proc.returncode, out
        except subprocess.TimeoutExpired:
            return None, interrupt(proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def interrupt(proc: subprocess.Popen, grace: float = 5.0) -> str:
    """Stop ``proc`` with SIGINT (ab, perf and strace answer it by printing what they have so far),
    then SIGKILL if it still runs ``grace`` seconds later; returns what it printed (its piped output)."""
    proc.send_signal(signal.SIGINT)
    for wait in (grace, None):
        try:
            return proc.communicate(timeout=wait)[0] or ""
        except subprocess.TimeoutExpired:
            proc.kill()
    return ""  # not reached: communicate() without a time-out returns
