# tinyloop/quiz/catalog.py
"""The quizzes: for each program, the lines it prints on each loop, in order, and why.

Rules this file keeps:
  * asyncio (the running CPython's) is the reference: ``Quiz.order`` is the
    order it prints, and the answer a reader is graded against.
  * A loop that prints another order says so in a ``Difference``, which
    quotes the entry of tests/conformance/KNOWN_DIFFERENCES.md that explains
    it (tests/test_quiz.py checks that the quote is there, word for word,
    and that every loop prints exactly what this table says).
  * The choices a reader orders are the printed lines plus any decoys
    (lines that never print), lettered in alphabetical order, so the letters
    give nothing away.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KNOWN_DIFFERENCES", "LOOPS", "PROGRAMS", "QUIZZES", "Difference", "Quiz", "get"]

PROGRAMS = Path(__file__).resolve().parent / "programs"

# The loops every quiz runs on, the reference first.
LOOPS: tuple[str, ...] = ("asyncio", "uvloop", "aio", "uv")

# Where the differences are explained, relative to the repository's root.
KNOWN_DIFFERENCES = "tests/conformance/KNOWN_DIFFERENCES.md"

# The entries of KNOWN_DIFFERENCES.md that the quizzes show.
POLL_PHASE = ("tinyloop.uv",
              "an I/O callback (a protocol's `data_received`, a reader added with `add_reader`) runs in "
              "libuv's poll phase, as soon as its descriptor is ready, so it may run before callbacks "
              "that `call_soon` queued earlier in the same turn.")
TIMERS_FIRST = ("uvloop", "libuv runs due timers before the callbacks queued with call_soon (its idle handles)")
TIES_IN_ORDER = ("tinyloop.aio", "Timers due at the same moment run in the order they were scheduled")


@dataclass(frozen=True)
class Difference:
    """Loops that print ``order`` instead of asyncio's, for the reason quoted.

    ``section`` is the heading of KNOWN_DIFFERENCES.md the entry is under;
    ``quote`` its words (whitespace aside).  A loop that is not ours and
    has no entry there (uvloop keeping an order asyncio does not) has an
    empty ``section``, and ``quote`` is then our own one-line reason.
    """

    loops: tuple[str, ...]
    order: tuple[str, ...]
    section: str
    quote: str
    #: False where these loops' order is not reproducible (``order`` is then
    #: the one they usually print; any order of the same lines agrees).
    steady: bool = True


@dataclass(frozen=True)
class Quiz:
    """One program (``programs/NAME.py``), its order on asyncio, and the reason for it.

    ``order`` is the printed lines in asyncio's order; ``decoys`` are lines
    the program seems to print but never does; ``why`` explains the order
    (shown after grading and in the book); ``chapter`` is the chapter whose
    mechanism decides it.
    """

    name: str
    chapter: str
    order: tuple[str, ...]
    why: str
    differences: tuple[Difference, ...] = ()
    decoys: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return PROGRAMS / f"{self.name}.py"

    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def title(self) -> str:
        """The program's docstring: the question, in one line."""
        text = self.source().split('"""')[1]
        return " ".join(text.split())

    @property
    def choices(self) -> dict[str, str]:
        """Letter -> line, for every line any loop prints and every decoy, in alphabetical order."""
        lines = set(self.order) | set(self.decoys)
        for difference in self.differences:
            lines |= set(difference.order)
        ordered = sorted(lines, key=lambda line: (line.casefold(), line))
        return dict(zip(string.ascii_lowercase, ordered))

    def expected(self, loop: str) -> tuple[str, ...]:
        """The lines ``loop`` prints, in order (KeyError for a loop not in LOOPS)."""
        if loop not in LOOPS:
            raise KeyError(f"unknown loop {loop!r}; the loops are {', '.join(LOOPS)}")
        for difference in self.differences:
            if loop in difference.loops:
                return difference.order
        return self.order

    def agrees(self, loop: str, lines: tuple[str, ...] | list[str] | None) -> bool:
        """Whether ``lines``, printed by ``loop``, are what the catalog declares for it."""
        if lines is None:
            return False
        expected = self.expected(loop)
        if any(loop in d.loops and not d.steady for d in self.differences):
            return sorted(lines) == sorted(expected)
        return tuple(lines) == expected

    def letters(self, lines: tuple[str, ...] | list[str]) -> str:
        """``lines`` as the reader would answer them: "b,a,c" (a line not a choice shows as "?")."""
        by_line = {line: letter for letter, line in self.choices.items()}
        return ",".join(by_line.get(line, "?") for line in lines)


QUIZZES: tuple[Quiz, ...] = (
    Quiz("call_later_zero", "callbacks",
         ("main goes on", "call_soon", "call_later(0)"),
         "call_later(0) makes a timer, not a ready callback: it waits in the timer heap until the next "
         "iteration moves the due timers to the end of the ready queue, behind the callback call_soon "
         "queued already. libuv runs due timers in a phase of their own, before the idle handle that "
         "runs uvloop's ready queue; tinyloop.uv's timer callback appends them to the ready queue as "
         "Part II does, and keeps asyncio's order.",
         differences=(Difference(("uvloop",), ("main goes on", "call_later(0)", "call_soon"), *TIMERS_FIRST),)),
    Quiz("queued_while_running", "callbacks",
         ("first", "second", "timer", "queued by first"),
         "An iteration runs only the callbacks that were ready when it began: first, second, and the timer "
         "it found due and appended behind them. What first queues waits for the next iteration, so a "
         "callback that requeues itself cannot starve the others. uvloop runs the due timer first, in "
         "libuv's timer phase.",
         differences=(Difference(("uvloop",), ("timer", "first", "second", "queued by first"), *TIMERS_FIRST),)),
    Quiz("same_deadline", "callbacks",
         ("first", "third", "second", "fourth", "fifth"),
         "asyncio's timer heap compares deadlines alone, and heapq is not stable: five timers due at the "
         "same moment come out in an order that depends on the heap's shape, not on when they were set. "
         "Part II's heap breaks ties with a sequence number, so aio (in Python) and uv (in C) run them in "
         "the order they were scheduled; so does uvloop, whose libuv timers break ties by start order. "
         "The order of timers with equal deadlines is a promise asyncio never made.",
         differences=(Difference(("aio", "uv"), ("first", "second", "third", "fourth", "fifth"), *TIES_IN_ORDER),
                      Difference(("uvloop",), ("first", "second", "third", "fourth", "fifth"), "",
                                 "libuv's timer heap breaks ties between equal deadlines by the order the "
                                 "timers were started, but uvloop rounds each delay to whole milliseconds "
                                 "from a clock that moves between the calls, so a timer now and then lands "
                                 "a millisecond off", steady=False))),
    Quiz("exception_in_callback", "callbacks",
         ("broken runs", "handler: oops", "next callback"),
         "The loop runs every callback inside a try: the exception goes to the loop's exception handler "
         "(call_exception_handler), and the next callback runs as if nothing happened."),
    Quiz("io_vs_ready", "callbacks",
         ("main waits", "call_soon", "reader"),
         "asyncio's iteration waits (with a timeout of 0, since a callback is ready), appends the reader's "
         "callback behind what is queued, then runs the queue in order. On libuv the reader runs in the "
         "poll phase, as soon as epoll reports the socket; the callback main queued while the idle handle "
         "ran the ready queue waits for the next iteration's idle phase.",
         differences=(Difference(("uvloop", "uv"), ("main waits", "reader", "call_soon"), *POLL_PHASE),)),
    Quiz("first_step", "coroutines",
         ("task created", "child starts", "child awaited"),
         "create_task schedules the task's first step with call_soon and returns: the child's body runs "
         "only when main gives the loop back at `await task`."),
    Quiz("sleep_zero", "coroutines",
         ("A 1", "B 1", "A 2", "B 2"),
         "gather wraps each coroutine in a task, scheduled in argument order. sleep(0) is a bare yield: "
         "the task's next step goes to the end of the ready queue, behind the other task's."),
    Quiz("future_in_callback", "coroutines",
         ("resolved", "queued after resolve", "done"),
         "set_result does not run the task that awaits the future: it schedules the future's done "
         "callbacks (the task's wake-up) with call_soon, behind the callback queued before it."),
    Quiz("done_callback", "coroutines",
         ("child returns", "main wakes", "done callback"),
         "By the time main adds the done callback, sleep(0) has let the child run to its end. A done "
         "callback added to a finished future is scheduled with call_soon at once, and `await task` on a "
         "finished task does not give the loop back at all, so main prints before the callback's turn."),
    Quiz("cancel_sleeping", "coroutines",
         ("cancel() returned", "sleeper sees CancelledError", "main sees CancelledError"),
         "cancel() only asks: it cancels the future the task waits on, and returns. The task's next step "
         "throws CancelledError into the coroutine at its await; main, awaiting the task, wakes after it "
         "is done."),
    Quiz("cancel_before_start", "coroutines",
         ("cancelled", "main sees CancelledError"),
         "A task cancelled before its first step never runs its body: that step throws CancelledError into "
         "a coroutine that has not started, which ends it at its first line, before the try, so not even "
         "the finally runs.",
         decoys=("child body", "child finally")),
    Quiz("event_wakeup", "coroutines",
         ("set() returned", "C wakes", "A wakes", "B wakes"),
         "set() resolves the waiters' futures in the order they began to wait (the tasks were made C, A, "
         "B), which schedules their wake-ups in that order; none runs before main gives the loop back."),
    Quiz("shield", "coroutines",
         ("outer cancelled", "main goes on", "inner finishes"),
         "shield gives the outer task a future of its own to await: cancelling the outer task cancels that "
         "future, not the inner task, which sleeps on and finishes later with nobody awaiting it."),
    Quiz("queue_handoff", "coroutines",
         ("put 1", "got 1", "put 2", "got 2"),
         "`await queue.put(1)` on a queue with room does not give the loop back: the producer goes on to "
         "its second put, which waits. The consumer's get frees the slot and wakes the producer with "
         "call_soon, prints, and waits for the next item."),
    Quiz("data_received", "libuv",
         ("call_soon", "data_received"),
         "The same race as io_vs_ready, through a transport. asyncio's transport reads in a callback that "
         "the wait's event queues behind call_soon's; on libuv the read happens in the poll phase, so "
         "data_received runs before the callback main queued.",
         differences=(Difference(("uvloop", "uv"), ("data_received", "call_soon"), *POLL_PHASE),)),
)


def get(name: str) -> Quiz:
    """The quiz called ``name``; KeyError (with the names) for any other."""
    for quiz in QUIZZES:
        if quiz.name == name:
            return quiz
    raise KeyError(f"no quiz {name!r}; `python -m tinyloop quiz --list` names them: "
                   + ", ".join(quiz.name for quiz in QUIZZES))
