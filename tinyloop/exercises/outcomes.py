"""Each test's outcome, sent by pytest to the checker through a pipe the checker
owns: the evidence a check's verdict is taken from.

Two sides:

  * the pytest plugin (``-p tinyloop.exercises.outcomes``), in the test
    process: with ``TINYLOOP_OUTCOME_FD`` set, it writes one JSON line per
    event to that descriptor (the write end of the checker's pipe): the
    ids collected, each test's start, each phase's report (setup, call,
    teardown: outcome, the failure's text) and the session's end;
  * :class:`Channel`, in the checker: makes the pipe, reads it in a thread
    and keeps what came, the test running last included (a run stopped at a
    wall-clock limit names it).

A check graded for credit adds a *canary*: a test file of the checker's
(:func:`write_canary`), run last, whose one test must fail with a random
nonce in its failure text.  Code that makes pytest pass tests without
running them (a patched ``runtest``, outcomes forged on the pipe) passes
the canary too, or reports it without its nonce, and the check fails.  It
raises the bar; it is no proof: code in the test process can read the
canary's file and spare it (see chapters/teachers.md).

The plugin also makes its process non-dumpable (prctl(2) PR_SET_DUMPABLE):
other processes of the same user (a server a test started, running the
student's code) can then neither open its descriptors through
/proc/PID/fd nor ptrace it, and so cannot write on the pipe.  Code that runs
inside the pytest process itself can (see chapters/teachers.md).

Rules this module keeps:
  * A report file in the test's own folder is never read: it can be forged.
  * The reader is bounded: at most :data:`MAX_BYTES` are kept; a flood is
    itself a reason to fail.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field

__all__ = ["CANARY_FILE", "ENV", "MAX_BYTES", "Canary", "Channel", "Outcome", "is_canary", "undumpable",
           "write_canary"]

ENV = "TINYLOOP_OUTCOME_FD"
MAX_BYTES = 32 << 20  # what the checker reads from one run at most
_TEXT = 20_000        # characters of one failure's text sent


CANARY_FILE = "test_canary.py"  # the checker's canary test file (write_canary)
_CANARY_TEST = "test_canary_"  # its one test's name, before the nonce


@dataclass(frozen=True)
class Canary:
    """A canary test written by :func:`write_canary`: ``path`` its file, ``name``
    its test function, ``nonce`` the text its failure report must hold."""

    path: str
    name: str
    nonce: str

    def result(self, results: dict[str, "Outcome"]) -> "Outcome | None":
        """The canary's outcome among ``results`` (keyed by node id), or None."""
        return next((r for i, r in results.items() if i.endswith("::" + self.name)), None)

    def failed_as_it_must(self, results: dict[str, "Outcome"]) -> bool:
        """True if the canary ran and failed with its nonce in the failure's text."""
        found = self.result(results)
        return found is not None and found.called and found.outcome == "failed" and self.nonce in found.text


def write_canary(folder: str | os.PathLike[str]) -> Canary:
    """Write the canary test file into ``folder`` (made readable by all: a
    sandbox's user runs it) and return it.  Its test asserts that two
    different random strings are equal, so it fails, naming both."""
    import secrets
    nonce, other = secrets.token_hex(8), secrets.token_hex(8)
    name = _CANARY_TEST + secrets.token_hex(4)
    path = os.path.join(folder, CANARY_FILE)
    with open(path, "w", encoding="utf-8") as out:
        out.write(f'"""The checker\'s canary: this test must fail, naming {nonce}."""\n\n\n'
                  f"def {name}():\n    assert {nonce!r} == {other!r}\n")
    os.chmod(path, 0o644)
    return Canary(path, name, nonce)


def is_canary(nodeid: str) -> bool:
    """True for the canary's node id.  The checker passes its file last, so pytest
    runs it last; the reach plugin keeps it, and last."""
    file, _, name = nodeid.partition("::")
    # Outside pytest's rootdir, a file's part of the node id is empty.
    return (file == "" or file.endswith(CANARY_FILE)) and name.startswith(_CANARY_TEST)


# -- the plugin, in the test process -----------------------------------------

_fd = -1


def _send(record: dict) -> None:
    if _fd < 0:
        return
    data = (json.dumps(record) + "\n").encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(_fd, data):]
    except OSError:  # the checker is gone: nothing to tell
        pass


def _close_in_child() -> None:
    global _fd
    if _fd >= 0:
        try:
            os.close(_fd)
        except OSError:
            pass
        _fd = -1


def pytest_configure(config) -> None:
    global _fd
    value = os.environ.pop(ENV, "")
    if not value.isdigit():
        return
    _fd = int(value)
    os.set_inheritable(_fd, False)  # no program a test executes gets it
    os.register_at_fork(after_in_child=_close_in_child)  # nor a process forked by Python
    undumpable()  # nor another process of this user, through /proc/PID/fd or ptrace


def undumpable() -> None:
    """Make this process non-dumpable (prctl(2) PR_SET_DUMPABLE 0): another process of
    the same user can then neither ptrace it nor open its descriptors through
    /proc/PID/fd (ptrace(2), "Ptrace access mode checking").  Linux only; a
    no-op elsewhere."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


def pytest_collection_finish(session) -> None:
    _send({"collected": [item.nodeid for item in session.items]})


def pytest_collectreport(report) -> None:
    if report.failed:  # a test module that does not import: a failure with no test id
        _send({"id": report.nodeid or "(collection)", "when": "collect", "outcome": "failed",
               "text": report.longreprtext[-_TEXT:]})


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _send({"start": nodeid})


def pytest_runtest_logreport(report) -> None:
    record = {"id": report.nodeid, "when": report.when, "outcome": report.outcome}
    if report.failed:
        text = report.longreprtext
        record["text"] = text if len(text) <= _TEXT else text[:_TEXT // 2] + "\n...\n" + text[-_TEXT // 2:]
    _send(record)


def pytest_sessionfinish(session, exitstatus) -> None:
    _send({"exit": int(exitstatus)})


# -- the checker's side ------------------------------------------------------

@dataclass
class Outcome:
    """One test's result as the checker saw it reported: ``outcome`` is
    ``"passed"``, ``"failed"`` or ``"skipped"``; ``text`` a failure's report."""

    id: str
    outcome: str = "passed"
    text: str = ""
    called: bool = False  # its call phase reported (setup did not fail or skip)
    done: bool = False    # its teardown reported: it ran to its end


@dataclass
class Channel:
    """A pipe whose write end a test process gets (:attr:`env`, :attr:`pass_fds`),
    read by a thread of this process until the writers close it."""

    collected: list[str] | None = None
    started: list[str] = field(default_factory=list)
    started_at: float = 0.0  # time.monotonic() when the last test started
    results: dict[str, Outcome] = field(default_factory=dict)
    exit: int | None = None
    flooded: bool = False
    garbled: int = 0  # lines that were not a report

    def __post_init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_inheritable(self._read, False)
        self._thread = threading.Thread(target=self._reader, daemon=True)
        self._thread.start()

    @property
    def env(self) -> dict[str, str]:
        """The environment that makes the plugin write here."""
        return {ENV: str(self._write)}

    @property
    def pass_fds(self) -> tuple[int]:
        return (self._write,)

    def started_writer(self) -> None:
        """Close this process's copy of the write end, once the test process has it:
        the reader then ends when that process and its children are gone."""
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

    def finish(self, timeout: float = 5.0) -> None:
        """Stop reading (the writers are gone, or ``timeout`` seconds passed) and close."""
        self.started_writer()
        self._thread.join(timeout)

    @property
    def running(self) -> str | None:
        """The test that started last and did not finish, or None."""
        if self.started and not (self.started[-1] in self.results and self.results[self.started[-1]].done):
            return self.started[-1]
        return None

    def _reader(self) -> None:
        kept, pending = 0, b""
        try:
            while True:
                chunk = os.read(self._read, 65536)
                if not chunk:
                    break
                kept += len(chunk)
                if kept > MAX_BYTES:
                    self.flooded = True
                    continue  # keep draining, so a writer never blocks forever
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._take(line)
        finally:
            os.close(self._read)

    def _take(self, line: bytes) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            self.garbled += 1
            return
        if not isinstance(record, dict):
            self.garbled += 1
        elif "collected" in record:
            self.collected = [str(i) for i in record["collected"]]
        elif "start" in record:
            self.started.append(str(record["start"]))
            self.started_at = time.monotonic()
        elif "exit" in record:
            self.exit = record["exit"] if isinstance(record["exit"], int) else -1
        elif "id" in record:
            result = self.results.setdefault(str(record["id"]), Outcome(str(record["id"])))
            outcome, when = record.get("outcome"), record.get("when")
            if outcome == "failed":
                result.outcome = "failed"
                result.text = result.text or str(record.get("text", ""))
            elif outcome == "skipped" and result.outcome == "passed":
                result.outcome = "skipped"
            result.called |= when == "call"
            result.done |= when == "teardown"
        else:
            self.garbled += 1
