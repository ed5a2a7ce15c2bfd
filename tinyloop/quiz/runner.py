# tinyloop/quiz/runner.py
"""Run one quiz program on one loop: ``python -m tinyloop.quiz.runner LOOP PROGRAM``.

The quiz command starts this in a subprocess per loop, so that a program
that hangs or crashes costs only its own process, and each loop starts from
a fresh interpreter.  The program's ``main()`` runs under
``asyncio.Runner(loop_factory=...)``, the way ``asyncio.run`` would run it
on that loop.  Exit status: the program's (0 when it returns), or
``UNAVAILABLE`` (3) with one line on stderr when the loop is not installed
here (uvloop not installed, tinyloop.uv's extension not built).
"""

from __future__ import annotations

import asyncio
import importlib
import runpy
import sys
from collections.abc import Callable

__all__ = ["FACTORIES", "UNAVAILABLE", "loop_factory", "main"]

UNAVAILABLE = 3

# Loop name -> (module, name of its loop factory).  uvloop is imported only
# here, when asked for, and only if installed: tinyloop itself needs none of it.
FACTORIES: dict[str, tuple[str, str]] = {
    "asyncio": ("asyncio", "new_event_loop"),
    "uvloop": ("uvloop", "new_event_loop"),
    "aio": ("tinyloop.aio", "new_event_loop"),
    "uv": ("tinyloop.uv", "new_event_loop"),
}


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The function that makes a new loop of kind ``loop`` (a key of FACTORIES).

    Raises KeyError for an unknown name, ImportError when the loop is not
    installed here (its message says why).
    """
    module_name, attribute = FACTORIES[loop]
    module = importlib.import_module(module_name)
    factory = getattr(module, attribute)
    if module_name == "tinyloop.uv":
        from tinyloop.uv import loop as _  # noqa: F401  (raises ImportError if the extension is not built)
    return factory


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in FACTORIES:
        print(f"usage: python -m tinyloop.quiz.runner {{{'|'.join(FACTORIES)}}} PROGRAM", file=sys.stderr)
        return 2
    loop, program = args
    try:
        factory = loop_factory(loop)
    except ImportError as error:
        print(f"{loop} is not installed here: {str(error).splitlines()[0]}", file=sys.stderr)
        return UNAVAILABLE
    namespace = runpy.run_path(program, run_name="tinyloop_quiz")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(namespace["main"]())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
