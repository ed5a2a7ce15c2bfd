# tinyloop/cli.py
"""tinyloop's command line.

  python -m tinyloop list                      the stages, with their chapters
  python -m tinyloop serve STAGE [--host H] [--port P]
  python -m tinyloop exercises                 the exercises, by chapter
  python -m tinyloop start EXERCISE [FILE]     write an exercise's starter file
  python -m tinyloop check EXERCISE [FILE]     grade a solution
"""

from __future__ import annotations

import argparse
import sys

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


def _exercises(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.list_exercises()


def _start(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.start(args.exercise, args.file)


def _check(args: argparse.Namespace) -> int:
    from tinyloop.exercises import cli
    return cli.check(args.exercise, args.file)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tinyloop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the stages").set_defaults(func=_list)

    serve = sub.add_parser("serve", help="serve HTTP with one stage's server")
    serve.add_argument("stage", help="a stage name from `python -m tinyloop list`")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one (default 8000)")
    serve.set_defaults(func=_serve)

    sub.add_parser("exercises", help="list the exercises").set_defaults(func=_exercises)
    start = sub.add_parser("start", help="write an exercise's starter file")
    start.add_argument("exercise")
    start.add_argument("file", nargs="?", help="where to write it (default: ./EXERCISE.py)")
    start.set_defaults(func=_start)
    check = sub.add_parser("check", help="grade a solution to an exercise")
    check.add_argument("exercise")
    check.add_argument("file", nargs="?", help="the solution (default: ./EXERCISE.py)")
    check.set_defaults(func=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
