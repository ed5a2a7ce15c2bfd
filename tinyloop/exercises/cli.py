"""The three exercise commands of ``python -m tinyloop`` (tinyloop/cli.py
parses the arguments and calls these):

  exercises               list them, by chapter
  start NAME [FILE]       write the starter file (NAME.py, or NAME.pyx for
                          a Cython exercise), say what to do
  check NAME [FILE]       grade a solution (--format text|json|junit)

grade and progress are in tinyloop/exercises/grading.py, classroom in
tinyloop/exercises/classroom.py.

Each returns the process's exit code: 0 passed (or done), 1 failed, 2 a
usage error (no such exercise or file, a file in the way).  Errors go to
standard error in one line; nothing here prints a traceback at a student.
"""

from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path

from tinyloop.exercises import catalog, checker, markers

__all__ = ["check", "list_exercises", "start", "watch"]


def _error(message: str) -> int:
    print(f"tinyloop: {message}", file=sys.stderr)
    return 2


def list_exercises() -> int:
    found = catalog.exercises()
    if not found:
        print("no exercises yet")
        return 0
    width = max(len(e.name) for e in found)
    for chapter in catalog.chapters():
        print(f"{chapter}:")
        for e in catalog.by_chapter(chapter):
            print(f"  {e.name:<{width}}  {e.title}")
    print(f"\nstart one with `{markers.python_command()} -m tinyloop start NAME`")
    return 0


def start(name: str, file: str | None) -> int:
    try:
        exercise = catalog.get(name)
    except KeyError as error:
        return _error(error.args[0])
    target = Path(file if file is not None else markers.default_file(exercise))
    text = markers.starter(exercise, file)
    try:
        if target.exists():
            if not target.is_file() or target.read_text() != text:
                return _error(f"{target} exists and is not the untouched starter; not "
                              "overwriting it (move it away, or give another file name)")
            print(f"{target} is already the starter file")
        else:
            target.write_text(text)
            print(f"wrote {target}")
    except (OSError, UnicodeDecodeError) as error:
        return _error(f"cannot write {target}: {getattr(error, 'strerror', None) or error}")
    print()
    print(f"Exercise {exercise.name} (chapter {exercise.chapter}): {exercise.title}")
    print()
    print(textwrap.fill(" ".join(exercise.instructions.split()), width=79))
    print()
    lines = markers.unwritten_lines(text, exercise.name)
    print(f"Write your code in place of the NotImplementedError on line"
          f"{'s' * (len(lines) > 1)} {', '.join(map(str, lines))}, then run:")
    print(f"    {markers.check_command(exercise.name, file, markers.python_command())}")
    return 0


def check(name: str, file: str | None, fmt: str = "text") -> int:
    """``fmt``: "text" (for a student: the verdict is also remembered for
    ``progress``), "json" or "junit" (for a teacher's tools: nothing is remembered)."""
    try:
        exercise = catalog.get(name)
    except KeyError as error:
        return _error(error.args[0])
    path = file if file is not None else markers.default_file(exercise)
    # SIGTERM (grade's or the mutation runner's time-out) becomes an exit, so
    # the checker's finally blocks stop the test session it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.monotonic()
    try:
        report = checker.check(exercise, path)
    except checker.CheckerError as error:
        return _error(str(error))
    from tinyloop.exercises import grading
    if fmt == "text":
        # A student's own check is remembered for `progress`; json and junit
        # are for a teacher's tools (grade runs `check --format json`), whose
        # checks of other people's files are not the teacher's progress.
        grading.record(report)
    if fmt == "json":
        import json
        print(json.dumps(grading.report_json(report), indent=1))
    elif fmt == "junit":
        print(grading.report_junit(report, time.monotonic() - started))
    else:
        print(report.render())
    return 0 if report.passed else 1


def watch(name: str, file: str | None, interval: float = 0.5) -> int:
    """Check ``file`` now and again after every save, until Ctrl-C (as rustlings does).

    A save is a change of the file's modification time or size, polled every
    ``interval`` seconds: the standard library's way, which any editor's
    save (in place, or a rename over the file) shows.
    """
    try:
        exercise = catalog.get(name)
    except KeyError as error:
        return _error(error.args[0])
    path = Path(file if file is not None else markers.default_file(exercise))

    def stamp() -> tuple[float, int] | None:
        try:
            info = path.stat()
        except OSError:
            return None
        return (info.st_mtime, info.st_size)

    seen = None
    try:
        while True:
            now = stamp()
            if now != seen:
                seen = now
                print("\033[2J\033[H", end="")  # a clear screen for each check
                check(name, str(path))
                print(f"\nwatching {path}: the check runs again when you save it (Ctrl-C stops)")
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
