# tinyloop/cli.py
"""tinyloop's command line.

  python -m tinyloop list                      the stages, with their chapters
  python -m tinyloop serve STAGE [--host H] [--port P] [--workers N] [--stats]
  python -m tinyloop trace STAGE [--out DIR] [--requests N] [--concurrency C] [--compute-ms MS]
  python -m tinyloop trace --loop aio|uv|ring|asyncio|uvloop SCRIPT [ARGS...]
  python -m tinyloop exercises                 the exercises, by chapter
  python -m tinyloop start EXERCISE [FILE]     write an exercise's starter file
  python -m tinyloop check EXERCISE [FILE] [--format text|json|junit]   grade a solution
  python -m tinyloop watch EXERCISE [FILE]     check again on every save
  python -m tinyloop progress [DIR]            which exercises pass, by chapter
  python -m tinyloop grade DIR [--jobs N] [--exercises A,B] [--student NAME] [--out OUT]
                                               grade a class in parallel (CSV, results.json, JUnit)
  python -m tinyloop classroom DIR [--source URL[@REF]]   a GitHub Classroom repository (starters, workflow)
  python -m tinyloop gradescope --exercises A,B --out autograder.zip [--source URL@REF] [--rubric FILE]
                                               a Gradescope autograder (setup.sh, run_autograder)
  python -m tinyloop book [--serve] [--class]  build the book (and serve it on 127.0.0.1)
  python -m tinyloop quiz [NAME] [--list]      predict the order of a program's lines, then see it
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

from tinyloop import stages
from tinyloop.serving import announce, listen, log, stop_on_sigterm


def _list(args: argparse.Namespace) -> int:
    width = max(len(stage.name) for stage in stages.STAGES)
    for stage in stages.STAGES:
        print(f"{stage.name:<{width}}  {stage.chapter:<11}  {stage.summary}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        module = stages.load(args.stage)
    except KeyError as error:
        print(error.args[0], file=sys.stderr)
        return 2
    except ImportError as error:
        # A stage that cannot run here: Part IV without its extension (the
        # message says what to install), not a bug to show a traceback for.
        print(f"tinyloop: stage {args.stage!r} cannot run here: {error}", file=sys.stderr)
        return 2
    if args.workers > 1:
        return _serve_workers(args, module)
    if args.stats:
        from tinyloop.commands import stats
        return stats.serve_with_stats(args.stage, module, args.host, args.port)
    stop_on_sigterm()
    try:
        sock = listen(args.host, args.port)
    except OSError as error:
        print(f"tinyloop: cannot listen on {args.host}:{args.port}: {error.strerror}", file=sys.stderr)
        return 1
    try:
        announce(args.stage, sock)
        module.serve(sock)
    except KeyboardInterrupt:
        log(f"{args.stage}: stopped")
    finally:
        sock.close()
    return 0


def _serve_workers(args: argparse.Namespace, module: ModuleType) -> int:
    """``serve STAGE --workers N`` with N > 1: N processes on one port (tinyloop/workers.py)."""
    from tinyloop import workers
    missing = workers.reuse_port_missing()
    if missing:
        print(f"tinyloop: --workers {args.workers} needs SO_REUSEPORT: {missing}; "
              "run one process with --workers 1", file=sys.stderr)
        return 2
    return workers.supervise(args.stage, module.serve, args.host, args.port, args.workers)


def _trace(args: argparse.Namespace) -> int:
    from tinyloop.commands import trace
    return trace.main(args)


def _exercises(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.list_exercises()


def _start(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.start(args.exercise, args.file)


def _check(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.check(args.exercise, args.file, args.format)


def _watch(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.watch(args.exercise, args.file)


def _progress(args: argparse.Namespace) -> int:
    from tinyloop.exercises import grading
    return grading.progress(args.dir)


def _grade(args: argparse.Namespace) -> int:
    from tinyloop.exercises import grading
    return grading.grade(args.dir, args.out, args.timeout, jobs=args.jobs, exercises=args.exercises,
                         student=args.student, force=args.force, unsandboxed=args.unsandboxed)


def _classroom(args: argparse.Namespace) -> int:
    from tinyloop.exercises import classroom
    return classroom.classroom(args.dir, args.source)


def _gradescope(args: argparse.Namespace) -> int:
    from tinyloop.exercises import gradescope
    return gradescope.build([n for n in args.exercises.split(",") if n], args.out, args.source, args.rubric,
                            args.timeout, args.sandbox)


def _quiz(args: argparse.Namespace) -> int:
    from tinyloop.quiz import catalog, cli
    return cli.main(args.name, list_only=args.list, answer=args.answer,
                    loops=args.loops or catalog.LOOPS, timeout=args.timeout)


def _book(args: argparse.Namespace) -> int:
    from tinyloop import book
    return book.main(args.out, "class" if args.class_edition else "reader",
                     args.port if args.serve else None)


def build_parser() -> argparse.ArgumentParser:
    from tinyloop.commands import trace as trace_command
    parser = argparse.ArgumentParser(prog="python -m tinyloop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the stages").set_defaults(func=_list)

    serve = sub.add_parser("serve", help="serve HTTP with one stage's server")
    serve.add_argument("stage", help="a stage name from `python -m tinyloop list`")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one (default 8000)")
    serve.add_argument("--workers", type=trace_command.positive_int, default=1, metavar="N",
                       help="processes sharing the port through SO_REUSEPORT, restarted if they die "
                            "(default 1: this process serves, as without the option)")
    serve.add_argument("--stats", action="store_true",
                       help="show a live panel of the loop: iterations/s, time in wait, timers and "
                            "callbacks, ready queue, slowest callbacks (needs rich)")
    serve.set_defaults(func=_serve)
    trace = sub.add_parser("trace", help="record a stage under load, or an asyncio script, as a trace "
                                         "(Chrome Trace Event JSON) and an HTML timeline")
    trace_command.add_arguments(trace)
    trace.set_defaults(func=_trace)

    sub.add_parser("exercises", help="list the exercises").set_defaults(func=_exercises)
    start = sub.add_parser("start", help="write an exercise's starter file")
    start.add_argument("exercise")
    start.add_argument("file", nargs="?", help="where to write it (default: ./EXERCISE.py)")
    start.set_defaults(func=_start)
    check = sub.add_parser("check", help="grade a solution to an exercise")
    check.add_argument("exercise")
    check.add_argument("file", nargs="?", help="the solution (default: ./EXERCISE.py)")
    check.add_argument("--format", choices=["text", "json", "junit"], default="text",
                       help="text for a student (default); json or junit for a teacher's tools")
    check.set_defaults(func=_check)
    watch = sub.add_parser("watch", help="check a solution again on every save (Ctrl-C stops)")
    watch.add_argument("exercise")
    watch.add_argument("file", nargs="?", help="the solution (default: ./EXERCISE.py)")
    watch.set_defaults(func=_watch)
    progress = sub.add_parser("progress", help="which exercises pass, by chapter")
    progress.add_argument("dir", nargs="?", default=".", help="where the exercise files are (default .)")
    progress.set_defaults(func=_progress)
    grade = sub.add_parser("grade", help="grade a folder of students' files: a CSV and results.json")
    grade.add_argument("dir", help="DIR/STUDENT/NAME.py (a folder or clone per student) or DIR/STUDENT__NAME.py")
    grade.add_argument("--out", help="where to write grades.csv and STUDENT/results.json (default DIR/grades)")
    grade.add_argument("--timeout", type=float, default=600.0,
                       help="seconds one student's check of one exercise may take (default 600)")
    grade.add_argument("--jobs", type=trace_command.positive_int, metavar="N",
                       help="checks run at once, each in a sandbox of its own (default: the usable cores)")
    grade.add_argument("--exercises", type=lambda text: [n.strip() for n in text.split(",") if n.strip()],
                       metavar="A,B,...", help="the assigned exercises: each is a row for every student "
                                               "and counts in max_score (default: those handed in)")
    grade.add_argument("--student", metavar="NAME",
                       help="DIR is this one student's submission (Gradescope's /autograder/submission)")
    grade.add_argument("--force", action="store_true",
                       help="check again the files already graded with the same content (OUT/cache.jsonl)")
    grade.add_argument("--unsandboxed", action="store_true",
                       help="grade even where the sandbox cannot be built: each check runs with your rights")
    grade.set_defaults(func=_grade)
    classroom = sub.add_parser("classroom", help="write a student repository for GitHub Classroom")
    classroom.add_argument("dir", help="a new folder")
    classroom.add_argument("--source", metavar="URL[@REF]",
                           help="the tinyloop repository GitHub's runners and students clone, at REF (a commit "
                                "or tag; default: this checkout's commit); default URL: this checkout's origin, "
                                "which must then be a URL, not a local path")
    classroom.set_defaults(func=_classroom)
    gradescope = sub.add_parser("gradescope", help="write a Gradescope autograder (setup.sh, run_autograder)")
    gradescope.add_argument("--exercises", required=True, metavar="A,B,...",
                            help="the assigned exercises, each a test of the autograder (1 point, or the rubric's)")
    gradescope.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    gradescope.add_argument("--source", metavar="URL@REF",
                            help="setup.sh clones tinyloop from URL at REF (default: this checkout's commit, "
                                 "shipped inside the zip)")
    gradescope.add_argument("--rubric", metavar="FILE",
                            help="partial credit: per exercise its points and the weights of its check's steps "
                                 "(TOML, or JSON)")
    gradescope.add_argument("--timeout", type=float, default=300.0,
                            help="seconds one check may take (default 300)")
    gradescope.add_argument("--sandbox", choices=["preferred", "required", "never"], default="preferred",
                            help="where tinyloop's sandbox cannot be built in Gradescope's container: grade without "
                                 "it (preferred, the default), score 0 with the reason (required); never: do not "
                                 "use it")
    gradescope.set_defaults(func=_gradescope)
    book = sub.add_parser("book", help="build the book from this checkout, print where to open it")
    book.add_argument("--serve", action="store_true", help="then serve it on 127.0.0.1 until Ctrl-C")
    book.add_argument("--port", type=int, default=8080, help="port for --serve; 0 picks a free one (default 8080)")
    book.add_argument("--class", dest="class_edition", action="store_true",
                      help="the class edition (exercise solutions left out) in docs/_build/class")
    book.add_argument("--out", type=Path, help="output folder (default docs/_build/html)")
    book.set_defaults(func=_book)
    quiz = sub.add_parser("quiz", help="predict the order a program prints in, then run it on every loop")
    quiz.add_argument("name", nargs="?", help="a quiz from --list (default: every quiz, in order)")
    quiz.add_argument("--list", action="store_true", help="name the quizzes, one a line")
    quiz.add_argument("--answer", metavar="LETTERS", help='your order, e.g. "b,a,c", instead of asking on stdin')
    quiz.add_argument("--loop", action="append", dest="loops", metavar="LOOP",
                      help="run on this loop only (asyncio, uvloop, aio, uv; repeatable; default: all)")
    quiz.add_argument("--timeout", type=float, default=30.0, help="seconds per loop (default 30)")
    quiz.set_defaults(func=_quiz)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
