# scripts/mutation.py
"""Measure the exercise checker by mutation: how many wrong solutions does it catch?

    python scripts/mutation.py                          every exercise
    python scripts/mutation.py --exercises run-once,task-step
    python scripts/mutation.py --list                   the mutants, without running them
    python scripts/mutation.py --only ours --exercises transport-write,uv-write-batch

Two measurements, both per exercise: cosmic-ray's operators (Python only),
and ours (tinyloop/exercises/mutants.py: a condition replaced by True or
False, a buffer not emptied, an offset not advanced, a registration not
removed), which edit text and so apply to the Cython exercises too, where
they are joined by the hand-written wrong solutions of HAND_WRITTEN.

For each exercise, the reference solution is written out as the file a
student would hand in (``markers.reference``), cosmic-ray makes every mutant
of the lines inside the exercise's marked region(s), and each mutant is
graded by ``python -m tinyloop.exercises.grading NAME FILE --verdict-only``,
the student's check (``python -m tinyloop check``) less the diagnosis of a
failure and the progress record: a FAILED verdict kills it.  The score is killed / (mutants - equivalent).

Writes benchmarks/results/mutation.json (``--out``), which the teachers' page
of the book renders; ``bash scripts/mutation.sh`` runs this under ``nice``.
"""

# Rules this file keeps:
#
#   * Only the student's file is mutated, in a temporary directory: the
#     repository is never touched, so a run can share the machine with work.
#   * cosmic-ray makes the mutants (its core operators, pruned in
#     EXCLUDED_OPERATORS, and two of ours: a statement left out, a value not
#     returned) and runs them, as a library in this process.
#   * Mutants run one at a time (cosmic-ray's local distributor), each with
#     a time limit; a check that does not finish counts as killed (the
#     checker itself gives up and fails after TESTS_TIMEOUT) and is reported
#     apart.
#   * A surviving mutant is either killed by a new test or property, or
#     listed in EQUIVALENT with the reason no test can tell it apart from the
#     reference.  An equivalent mutant is named by its operator and the
#     mutated source line, so the list survives edits elsewhere in the file.
#   * The checker runs with --verdict-only (no diagnosis of a failure): the
#     verdict is the same, only sooner.

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shlex
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

from tinyloop.exercises import catalog, checker, markers  # the venv's editable install (scripts/setup.sh)
from tinyloop.exercises.properties import last_line as properties_last_line

ROOT = Path(__file__).resolve().parent.parent

OUT = ROOT / "benchmarks" / "results" / "mutation.json"
SCHEMA = 1
TIMEOUT = 400.0  # seconds for one mutant's check (the checker's own limit is 300 s of tests)

# cosmic-ray's operators, less the ones that only multiply mutants of one
# kind: a binary operator is replaced by one other (+ by -, * by +, ...), not
# by all eleven; numbers are nudged by one either way (NumberReplacer) as is.
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_Add_(?!Sub).*",
    r"core/ReplaceBinaryOperator_Sub_(?!Add).*",
    r"core/ReplaceBinaryOperator_Mul_(?!Add).*",
    r"core/ReplaceBinaryOperator_Div_(?!Mul).*",
    r"core/ReplaceBinaryOperator_FloorDiv_(?!Mul).*",
    r"core/ReplaceBinaryOperator_Mod_(?!Add).*",
    r"core/ReplaceBinaryOperator_Pow_(?!Mul).*",
    r"core/ReplaceBinaryOperator_(RShift|LShift|BitOr|BitAnd|BitXor)_(?!Add).*",
    r"core/ReplaceComparisonOperator_Is_.*",      # `x is None` -> `x is not None` is kept (IsNot),
    r"core/ReplaceComparisonOperator_IsNot_Is$",  # the reverse once
]

# Survivors no test can kill, with the reason: {exercise: [(operator, line, reason)]}.
# ``line`` is the mutated source line, stripped, as in the reference.
_THREAD_NAME = 'name=f"client-{address[0]}:{address[1]}", daemon=True)'
EQUIVALENT: dict[str, list[tuple[str, str, str]]] = {
    "partial-writes": [
        ("core/ReplaceComparisonOperator_Gt_NotEq", "return sent > 0",
         "send() returns how many bytes it took, never fewer than 0, so sent != 0 and sent > 0 "
         "agree on every value it can return"),
    ],
    "kqueue-changes": [
        ("core/ReplaceComparisonOperator_NotEq_IsNot", "if want != have:",
         "want and have are bools, and True and False are singletons: `is not` and `!=` agree"),
    ],
    "callback-interest": [
        ("core/ReplaceComparisonOperator_NotEq_IsNot", "if conn.wants_read != self.reading:",
         "both are bools, and True and False are singletons: `is not` and `!=` agree"),
        ("core/ReplaceComparisonOperator_NotEq_IsNot", "if conn.wants_write != self.writing:",
         "both are bools, and True and False are singletons: `is not` and `!=` agree"),
        ("tinyloop/DeleteStatement", "return",
         "a done Connection wants neither to read nor to write (done means failed, or closing with "
         "no output left), so the code after the return finds only interests to remove, and "
         "close() has removed them already: removing them again is a no-op"),
    ],
    "transport-write": [
        ("core/ReplaceComparisonOperator_Eq_GtE", "if sent == len(data):",
         "send() returns how many of the given bytes the kernel took, never more than len(data), "
         "so sent >= len(data) and sent == len(data) agree on every value it can return"),
    ],
    "sock-retry": [
        ("tinyloop/DeleteStatement", "return  # a spurious wake-up: wait for the next readiness",
         "the except clause is the function's last statement, and the try's else runs only when "
         "nothing was raised, so `pass` there ends the call just as `return` does"),
    ],
    "task-step": [
        ("core/ReplaceComparisonOperator_IsNot_NotEq", "if yielded._loop is not self._loop:",
         "a Loop defines no __eq__, so it compares by identity: `!=` and `is not` agree"),
    ],
    "thread-per-connection": [
        ("core/NumberReplacer", _THREAD_NAME,
         "it changes only the thread's name (address[0] for address[1], say), which nothing "
         "reads: a debugger's label, not part of the exercise"),
    ],
}


def _equivalent_reason(exercise: str, operator: str, line: str) -> str | None:
    for op, code, reason in EQUIVALENT.get(exercise, []):
        if op == operator and code == line.strip():
            return reason
    return None


# --- two operators of ours ---------------------------------------------------
# cosmic-ray's core operators change an operator, a comparison, a number, a
# keyword.  The bugs the exercises invite are as often a line left out: a
# forgotten ``return``, a missing ``del`` or ``self.failed = True``, a call
# never made.  These two make those mutants, through cosmic-ray's own
# Operator interface (on parso's tree), registered as the provider "tinyloop".

def _operators():
    from parso.python.tree import Keyword
    from cosmic_ray.operators.operator import Example, Operator

    class DeleteStatement(Operator):
        """Replace one simple statement (an assignment, a call, a return, a del, a
        raise) by ``pass``: the line a student forgot."""

        def mutation_positions(self, node):
            parent = getattr(node, "parent", None)
            if (parent is not None and parent.type == "simple_stmt" and node.type not in
                    ("newline", "pass_stmt", "operator") and getattr(node, "value", None) != ";"):
                yield (node.start_pos, node.end_pos)

        def mutate(self, node, index):
            return Keyword("pass", node.start_pos, prefix=node.get_first_leaf().prefix)

        @classmethod
        def examples(cls):
            return (Example("x = 1\n", "pass\n"), Example("return f(x)\n", "pass\n"))

    class ReturnNone(Operator):
        """``return VALUE`` becomes ``return None``: a result computed and not given back."""

        def mutation_positions(self, node):
            if node.type == "return_stmt" and len(node.children) == 2 and \
                    node.children[1].get_code().strip() != "None":
                yield (node.start_pos, node.end_pos)

        def mutate(self, node, index):
            value = node.children[1]
            node.children[1] = Keyword("None", value.start_pos, prefix=value.get_first_leaf().prefix)
            node.children[1].parent = node
            return node

        @classmethod
        def examples(cls):
            return (Example("return x\n", "return None\n"),)

    return {"DeleteStatement": DeleteStatement, "ReturnNone": ReturnNone}


class _Provider:
    """A cosmic-ray operator provider (name -> Operator class)."""

    def __init__(self) -> None:
        self._operators = _operators()

    def __iter__(self):
        return iter(self._operators)

    def __getitem__(self, name: str):
        return self._operators[name]


def _config(name: str, ranges: list[str], python: str, timeout: float) -> str:
    lines = ", ".join(json.dumps(r) for r in ranges)
    excluded = ", ".join(json.dumps(e) for e in EXCLUDED_OPERATORS)
    command = f"{shlex.quote(python)} -m tinyloop.exercises.grading {name} {name}.py --verdict-only"
    return (f'[cosmic-ray]\nmodule-path = "{name}.py"\ntimeout = {timeout}\n'
            f'excluded-modules = []\ntest-command = {json.dumps(command)}\n\n'
            f'[cosmic-ray.distributor]\nname = "local"\n\n'
            f'[cosmic-ray.filters.line-filter]\nlines = {{ "{name}.py" = [{lines}] }}\n\n'
            f'[cosmic-ray.filters.operators-filter]\nexclude-operators = [{excluded}]\n')


def _session(work: Path, config_path: Path, dry_run: bool) -> tuple[Path, int]:
    """Make the session (cosmic-ray's work database) in ``work``, filter it to the
    region's lines and our operator choice, run it unless ``dry_run``; returns the
    session's path and the number of mutants."""
    from cosmic_ray import commands, modules, plugins
    from cosmic_ray.config import load_config
    from cosmic_ray.tools.filters.line_filter import LineFilter
    from cosmic_ray.tools.filters.operators_filter import OperatorsFilter
    from cosmic_ray.work_db import use_db

    plugins.OPERATOR_PROVIDERS.setdefault("tinyloop", _Provider())
    config = load_config(str(config_path))
    session = work / "session.sqlite"
    here = Path.cwd()
    os.chdir(work)  # module-path and the test command are relative to the work directory
    try:
        with use_db(str(session)) as db:
            commands.init(modules.find_modules([Path(config["module-path"])]), db,
                          config.operators_config)
            LineFilter().filter(db, argparse.Namespace(config=str(config_path)))
            OperatorsFilter().filter(db, argparse.Namespace(config=str(config_path)))
            pending = sum(1 for _ in db.pending_work_items)
            if not dry_run:
                commands.execute(db, config)
    finally:
        os.chdir(here)
    return session, pending


def measure(exercise, *, timeout: float, dry_run: bool = False, progress=print) -> dict:
    """Mutate one exercise's regions and grade every mutant; its entry of the JSON."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    with tempfile.TemporaryDirectory(prefix=f"mutation-{exercise.name}-") as tmp:
        work = Path(tmp)
        text = markers.reference(exercise, f"{exercise.name}.py")
        (work / f"{exercise.name}.py").write_text(text, encoding="utf-8")
        source = text.splitlines()
        regions = [r for r in markers.find_regions(text) if r.name == exercise.name]
        ranges = [f"{r.begin + 1}-{r.end - 1}" for r in regions]
        config = work / "mutation.toml"
        config.write_text(_config(exercise.name, ranges, sys.executable, timeout), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "PYTHONDONTWRITEBYTECODE": "1"}
        os.environ.update(env)  # the test command inherits it
        started = time.monotonic()
        session, pending = _session(work, config, dry_run)
        progress(f"{exercise.name}: {pending} mutants in lines {', '.join(ranges)}")
        entry = {"chapter": exercise.chapter, "module": exercise.module, "regions": ranges,
                 "tests": list(exercise.tests), "mutants": 0, "killed": 0, "timeouts": 0,
                 "incompetent": 0, "survived": 0, "equivalent": [], "survivors": [],
                 "seconds": round(time.monotonic() - started, 1)}
        with use_db(str(session), WorkDB.Mode.open) as db:
            for item, result in db.completed_work_items:
                if result.worker_outcome.value == "skipped":
                    continue
                mutation = item.mutations[0]
                line_no = mutation.start_pos[0]
                code = source[line_no - 1].strip()
                entry["mutants"] += 1
                if result.test_outcome == TestOutcome.INCOMPETENT:
                    # cosmic-ray could not make this mutant: reported, not counted.
                    entry["incompetent"] += 1
                    entry.setdefault("incompetent_detail", []).append(
                        {"line": line_no, "operator": mutation.operator_name,
                         "error": properties_last_line(result.output or "")})
                    continue
                if result.test_outcome == TestOutcome.KILLED:
                    entry["killed"] += 1
                    entry["timeouts"] += (result.output or "").strip() == "timeout"
                    continue
                reason = _equivalent_reason(exercise.name, mutation.operator_name, code)
                record = {"line": line_no, "code": code, "operator": mutation.operator_name,
                          "occurrence": mutation.occurrence, "diff": _short_diff(result.diff)}
                if reason:
                    entry["equivalent"].append({**record, "reason": reason})
                else:
                    entry["survived"] += 1
                    entry["survivors"].append(record)
            if dry_run:
                entry["mutants"] = pending
    counted = entry["mutants"] - entry["incompetent"] - len(entry["equivalent"])
    entry["score"] = round(entry["killed"] / counted, 3) if counted > 0 and not dry_run else None
    return entry


def _rescored(name: str, entry: dict) -> dict:
    """An earlier run's entry, scored with today's EQUIVALENT list (a survivor it names
    was equivalent then too), so that before and after compare like with like."""
    equivalent = [s for s in entry.get("survivors", [])
                  if _equivalent_reason(name, s["operator"], s["code"])]
    equivalent += entry.get("equivalent", [])
    counted = entry["mutants"] - entry.get("incompetent", 0) - len(equivalent)
    return {"mutants": entry["mutants"], "killed": entry["killed"], "incompetent": entry.get("incompetent", 0),
            "equivalent": len(equivalent), "survived": counted - entry["killed"],
            "score": round(entry["killed"] / counted, 3) if counted > 0 else None}


# --- ours: text operators, and hand-written wrong solutions -----------------------

# Wrong solutions of the Cython exercises, written by hand (cosmic-ray cannot
# parse Cython): {exercise: [(what, old text in a region, new text)]}.
HAND_WRITTEN: dict[str, list[tuple[str, str, str]]] = {
    "uv-write-batch": [
        ("no Py_INCREF of the write request: freed while libuv holds it",
         "Py_INCREF(request)   # libuv's reference", "pass   # libuv's reference"),
        ("the request does not keep the bytes alive", "request.data = pending", "request.data = None"),
        ("the pending list is not emptied after a flush", "self._pending = []\n", "pass\n"),
        ("the pending size is not reset after a flush", "self._pending_size = 0\n", "pass\n"),
        ("the bytes already sent are not skipped", "bufs[i].base += written", "pass"),
        ("a write below the mark is never flushed", "self._loop._to_flush.append(self)", "pass"),
        ("queued twice in a turn", "elif not self._queued:", "elif True:"),
        ("always sends at once (no batching)", "if self._pending_size > self._high_water:", "if True:"),
        ("no pause check: the protocol is never paused", "self._check_pause()", "pass"),
        ("a full send does not resume the protocol", "self._on_written(0)", "pass"),
    ],
    "uv-ready-queue": [
        ("runs what callbacks schedule in the same iteration", "while ntodo > 0:", "while ready:"),
        ("runs cancelled handles", "if handle._cancelled:\n                    continue",
         "if False:\n                    continue"),
        ("never stops the idle handle: the loop spins", "uv.uv_idle_stop(self._idle)", "pass"),
        ("stop() is ignored", "uv.uv_stop(self.uvloop)", "pass"),
    ],
    "uv-timer-heap": [],
}


# Our survivors no test can kill, with the reason: {exercise: [(operator, the
# mutated line as in the reference, stripped, reason)]}.
EQUIVALENT_OURS: dict[str, list[tuple[str, str, str]]] = {
    "uv-write-batch": [
        ("condition-true", "elif not self._queued:",
         "the transport is then on the flush list once per write of the turn; the first _flush "
         "sends the whole batch and empties _pending, and each later one finds nothing and "
         "returns: the same bytes in the same single writev, a few calls dearer"),
        ("hand-written", "queued twice in a turn",
         "the same mutant as condition-true on 'elif not self._queued:' (see there)"),
        ("condition-true", "if n > IOV_MAX_BATCH:",
         "every batch is then joined into one bytes object first: one uv_buf_t instead of n, "
         "the same bytes in the same order, a copy dearer"),
        ("condition-false", "if n > IOV_MAX_BATCH:",
         "a batch of more buffers than one writev takes is then handed whole to uv_try_write "
         "and uv_write; libuv caps each writev at IOV_MAX and writes the rest in later "
         "writevs, so the bytes arrive the same"),
        ("condition-true", "if n > 16:",
         "the uv_buf_t array is then always taken from the heap (and freed, since bufs is not "
         "small): the same buffers, a malloc dearer"),
    ],
    "uv-ready-queue": [
        ("condition-false", "if type(item) is Handle or type(item) is TimerHandle:",
         "every handle then takes the other branch, _run_handle, which runs a C handle just as "
         "_run_c does (and skips a cancelled one, as the branch's own test does): the branch is a "
         "shortcut for speed, and nothing but a clock can tell the two apart"),
        ("condition-true", "if self._debug or self._instrumented:",
         "_run_handle is Part II's way of running a handle (it times it, and calls the instruments "
         "when there are any); with neither debug mode nor an instrument it does what _run_c does, "
         "only slower: the branch is a shortcut for speed"),
    ],
    "uv-timer-heap": [
        ("condition-false", "if delay > MAXIMUM_SELECT_TIMEOUT:",
         "on x86-64 the uncapped conversion of an infinite or huge delay to a uint64_t gives "
         "2**63 ms, a timer that never fires, as the capped one does within a day's re-arms: no "
         "test here can tell; the cap is kept because that conversion is undefined in C"),
        ("condition-false", "if when == self._armed_when:",
         "the uv_timer_t is then started again for the deadline it is armed for already: "
         "uv_timer_start replaces the old start, so it fires when it would have, to the millisecond "
         "(a call to libuv saved is all the test buys)"),
    ],
}


# Our survivors that are not equivalent but do no harm a test could see, with
# why: {exercise: [(operator, the mutated line, stripped, why)]}.  They count
# against the score; the table prints the reason under each.
EXPLAINED_OURS: dict[str, list[tuple[str, str, str]]] = {
    "uv-write-batch": [
        ("condition-false", "if bufs is NULL:",
         "only PyMem_RawMalloc running out of memory takes this branch; no test here can make "
         "it fail (that needs fault injection into the allocator)"),
        ("condition-false", "elif written < 0:",
         "only an error from uv_try_write other than EAGAIN (EPIPE, ECONNRESET: the peer is "
         "gone) takes it; the mutant then hands uv_write a pointer before the first buffer, "
         "the kernel refuses the write on the dead socket before it reads a byte, and the "
         "same error reaches the protocol one callback later. Not equivalent (it reads "
         "outside the buffer), but no test's outcome differs"),
        ("condition-false", "if err < 0:",
         "uv_write fails at once only on a stream that is not writable or has no descriptor, "
         "and _flush is never reached then (write() refuses after write_eof(); _flush returns "
         "when the connection is lost or the handle gone): unreachable from the transport's API"),
    ],
    "uv-timer-heap": [
        ("condition-false", "while self._heap_len and (<TimerHandle>self._heap[0].timer)._cancelled:",
         "the uv_timer_t is then armed for a cancelled timer's deadline, and the loop wakes once "
         "for nothing: _fire_timers pops it and re-arms. The reference allows itself the same "
         "wake-up (cancel() never re-arms), so no test of callbacks and their times can fail it"),
        ("registration-not-removed", "uv.uv_timer_stop(self._timer)",
         "with the heap empty the uv_timer_t stays armed for the deadline it had, wakes the loop "
         "once, and _fire_timers finds nothing due: the same spurious wake-up the reference has "
         "after cancel(), which never re-arms"),
        ("condition-true", "if ready:",
         "the idle handle is then started when no timer was due too: libuv polls once without "
         "waiting, and _run_ready, finding the queue empty, stops the idle handle again (one "
         "turn of the loop, no callback run, no CPU kept)"),
    ],
}


def _explained_ours(exercise: str, operator: str, what: str) -> str | None:
    """Why a survivor of ours does no harm (EXPLAINED_OURS), or None."""
    return _reason_ours(EXPLAINED_OURS, exercise, operator, what)


def _equivalent_ours(exercise: str, operator: str, what: str) -> str | None:
    """Why a survivor of ours is equivalent (EQUIVALENT_OURS), or None."""
    return _reason_ours(EQUIVALENT_OURS, exercise, operator, what)


def _reason_ours(table: dict[str, list[tuple[str, str, str]]], exercise: str, operator: str,
                 what: str) -> str | None:
    """``table``'s reason for the mutant ``what`` (``line N: ORIGINAL -> MUTANT``), or None."""
    # A hand-written case is named by its description; an operator's by its line.
    original = what if operator == "hand-written" else what.partition(": ")[2].rpartition(" -> ")[0].strip()
    for op, line, reason in table.get(exercise, []):
        if op == operator and line == original:
            return reason
    return None


def _hand_written(exercise, text: str) -> list[tuple[str, str, str]]:
    """HAND_WRITTEN's cases of ``exercise`` as (operator, what, mutated text); a case
    whose text is in none of the regions is an error (the reference changed)."""
    cases = []
    regions = [r for r in markers.find_regions(text, "x.pyx") if r.name == exercise.name]
    lines = text.splitlines(keepends=True)
    spans = [(len("".join(lines[:r.begin])), len("".join(lines[:r.end - 1]))) for r in regions]
    for what, old, new in HAND_WRITTEN.get(exercise.name, []):
        at = next((text.find(old, a, b) for a, b in spans if text.find(old, a, b) >= 0), -1)
        if at < 0:
            raise SystemExit(f"mutation.py: HAND_WRITTEN case {what!r} of {exercise.name}: "
                             f"{old!r} is in no region of the reference")
        cases.append(("hand-written", what, text[:at] + new + text[at + len(old):]))
    return cases


def measure_ours(exercise, *, timeout: float, dry_run: bool = False, progress=print, jobs: int = 1) -> dict:
    """Grade every mutant our operators (and HAND_WRITTEN) make of ``exercise``,
    ``jobs`` at a time; its entry of the JSON's "ours"."""
    import subprocess

    from tinyloop.exercises import mutants
    filename = Path(markers.default_file(exercise)).name
    text = markers.reference(exercise, filename)
    cases = [(m.operator, f"line {m.line}: {m.original} -> {m.code}", m.text)
             for m in mutants.mutants(exercise.name, text, filename)]
    cases += _hand_written(exercise, text)
    entry = {"mutants": len(cases), "killed": 0, "timeouts": 0, "survived": 0, "survivors": [],
             "equivalent": [], "operators": sorted({c[0] for c in cases})}
    progress(f"{exercise.name}: {len(cases)} mutants of ours")
    started = time.monotonic()
    if dry_run:
        for operator, what, _ in cases:
            progress(f"    {operator}: {what}")
        return entry
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def grade(index: int, mutated: str) -> tuple[bool, bool]:
        """(killed, by time-out) for one mutant, checked in a folder of its own."""
        folder = Path(tmp) / str(index)
        folder.mkdir()
        path = folder / filename
        path.write_text(mutated, encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-m", "tinyloop.exercises.grading", exercise.name, str(path),
                                 "--verdict-only"],
                                cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=timeout) != 0, False
        except subprocess.TimeoutExpired:
            return True, True
        finally:
            checker.stop_session(proc)  # the check's own test session too

    with tempfile.TemporaryDirectory(prefix=f"mutation-ours-{exercise.name}-") as tmp:
        # --jobs checks at once: a Cython mutant's build (a minute of one core)
        # is most of its time, and builds of different files do not share.
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            verdicts = list(pool.map(grade, range(len(cases)), [mutated for _, _, mutated in cases]))
        for (operator, what, _), (killed, timed_out) in zip(cases, verdicts):
            entry["timeouts"] += timed_out
            reason = None if killed else _equivalent_ours(exercise.name, operator, what)
            if killed:
                entry["killed"] += 1
            elif reason:
                entry["equivalent"].append({"operator": operator, "mutant": what, "reason": reason})
                progress(f"    equivalent: {operator}: {what}")
            else:
                entry["survived"] += 1
                entry["survivors"].append({"operator": operator, "mutant": what})
                progress(f"    survived: {operator}: {what}")
    counted = entry["mutants"] - len(entry["equivalent"])
    entry["score"] = round(entry["killed"] / counted, 3) if counted else None
    entry["seconds"] = round(time.monotonic() - started, 1)
    return entry


def _short_diff(diff: str | None) -> list[str]:
    """The changed lines of a unified diff, without its headers."""
    if not diff:
        return []
    return [line for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))][:6]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/mutation.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exercises", help="comma list (default: every exercise)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the JSON (default {OUT.relative_to(ROOT)})")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds for one mutant's check")
    parser.add_argument("--label", default="", help="a word saved with the run (e.g. before, after)")
    parser.add_argument("--list", action="store_true", help="count the mutants, run none")
    parser.add_argument("--before", type=Path,
                        help="a JSON of an earlier run (e.g. before the checker was improved): "
                             "its scores are kept in this one's \"before\", for the book's table")
    parser.add_argument("--jobs", type=int, default=1,
                        help="our operators' mutants checked at once (default 1; 2 halves a Cython "
                             "exercise's run on two cores, its builds being most of it)")
    parser.add_argument("--only", choices=["both", "cosmic-ray", "ours"], default="both",
                        help="which operators to run (default both; ours alone needs no cosmic-ray)")
    args = parser.parse_args(argv)
    if args.only == "ours":
        return _main_ours(args, argv)
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        raise SystemExit("mutation.py: cosmic-ray is not installed (it is in the dev extra: "
                         "pip install -e '.[dev]')")
    # cosmic-ray mutates Python's syntax tree; a Cython exercise (Part IV)
    # has none, so its checker is measured by the hand-written wrong
    # solutions of tests/test_exercise_libuv.py instead.
    known = {e.name: e for e in catalog.exercises() if not e.extension}
    names = args.exercises.split(",") if args.exercises else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"mutation.py: unknown exercise {', '.join(unknown)}; choose from {', '.join(known)}")
    previous = json.loads(args.out.read_text()) if args.out.exists() and not args.list else {}
    data = {"schema": SCHEMA, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "label": args.label, "command": "python scripts/mutation.py " + " ".join(argv or sys.argv[1:]),
            "tool": _version("cosmic-ray"), "python": platform.python_version(),
            "excluded_operators": EXCLUDED_OPERATORS,
            "exercises": dict(previous.get("exercises", {}))}
    if args.before:
        earlier = json.loads(args.before.read_text(encoding="utf-8"))
        data["before"] = {"date": earlier.get("date"), "label": earlier.get("label"),
                          "note": "scores with the same equivalent mutants left out as in this run",
                          "exercises": {n: _rescored(n, e) for n, e in earlier.get("exercises", {}).items()}}
    elif "before" in previous:
        data["before"] = previous["before"]
    if "ours" in previous:  # our operators' results: this run changes them only without --exercises
        data["ours"] = previous["ours"]
    for name in names:
        entry = measure(known[name], timeout=args.timeout, dry_run=args.list,
                        progress=lambda line: print(line, flush=True))
        if args.list:
            continue
        data["exercises"][name] = entry
        print(f"  {name}: score {entry['score']}, {entry['killed']} killed "
              f"({entry['timeouts']} by time-out), {entry['survived']} survived, "
              f"{len(entry['equivalent'])} equivalent, {entry['incompetent']} incompetent, "
              f"in {entry['seconds']:.0f} s", flush=True)
        for survivor in entry["survivors"]:
            print(f"    survived: line {survivor['line']} {survivor['operator']}: {survivor['code']}")
        # Written after every exercise: an interrupted run keeps what it measured.
        order = list(known)
        data["exercises"] = dict(sorted(data["exercises"].items(),
                                        key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.only == "both" and not args.exercises:
        return _main_ours(args, argv)
    return 0


def _main_ours(args, argv) -> int:
    """Our operators on each exercise (Cython included); kept in the JSON's "ours"."""
    known = {e.name: e for e in catalog.exercises()}
    names = args.exercises.split(",") if args.exercises else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"mutation.py: unknown exercise {', '.join(unknown)}; choose from {', '.join(known)}")
    data = json.loads(args.out.read_text()) if args.out.exists() else {"schema": SCHEMA, "exercises": {}}
    ours = data.setdefault("ours", {"exercises": {}})
    for name in names:
        entry = measure_ours(known[name], timeout=args.timeout, dry_run=args.list,
                             progress=lambda line: print(line, flush=True), jobs=args.jobs)
        if args.list:
            continue
        ours["exercises"][name] = entry
        ours["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        ours["command"] = "python scripts/mutation.py " + " ".join(argv or sys.argv[1:])
        print(f"  {name}: ours {entry['score']}, {entry['killed']} of {entry['mutants']} killed "
              f"({entry['timeouts']} by time-out) in {entry['seconds']:.0f} s", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        args.out.with_name(args.out.stem + "-ours.txt").write_text(ours_table(data), encoding="utf-8")
    return 0


def ours_table(data: dict) -> str:
    """The "ours" part of a run's JSON as the text the teachers' page includes:
    per exercise, our mutants killed and every survivor."""
    ours = data.get("ours", {})
    order = [e.name for e in catalog.exercises()]
    lines = [f"{'exercise':<22} {'mutants':>7} {'killed':>6} {'score':>6}  survivors"]
    for name in sorted(ours.get("exercises", {}), key=lambda n: order.index(n) if n in order else len(order)):
        e = ours["exercises"][name]
        score = "-" if e.get("score") is None else f"{e['score']:.0%}"
        lines.append(f"{name:<22} {e['mutants']:>7} {e['killed']:>6} {score:>6}  {e['survived']}")
        for s in e.get("survivors", []):
            lines.append(f"    survived: {s['operator']}: {s['mutant']}")
            why = _explained_ours(name, s["operator"], s["mutant"])
            lines += [f"      {part}" for part in textwrap.wrap(why or "not explained yet", 90)]
        for s in e.get("killed_after", []):  # survived the run, killed by a test written since
            lines.append(f"    killed since: {s['operator']}: {s['mutant']}")
            lines += [f"      {part}" for part in textwrap.wrap(s["by"], 90)]
        for s in e.get("equivalent", []):
            lines.append(f"    equivalent: {s['operator']}: {s['mutant']}")
            lines += [f"      {part}" for part in textwrap.wrap(s["reason"], 90)]
    missing = [n for n in order if n not in ours.get("exercises", {})]
    if missing:
        lines.append(f"not measured: {', '.join(missing)}")
    lines.append(f"measured {ours.get('date', '?')} by: {ours.get('command', '?')}")
    return "\n".join(lines) + "\n"


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
