"""The map of an iteration: which class supplies which step, drawn from the code when the book is built.

    ```{loop-map} aio
    ```

draws tinyloop.aio's loop: one box per class that supplies a step (in the
order of the loop's method resolution, most derived on top), each step in
the box of the class whose method runs, and arrows in the order the steps
run, so a reader sees the iteration climb from Part II's ``run_once`` up
to Part III's ``_run_ready`` and down again.  ``{loop-map} uv`` draws
tinyloop.uv's: its ``run_once`` is the C base's (it comes first in the
method resolution order), which hands the thread to libuv, whose phases
call the C functions of tinyloop/uv/*.pyx; Part II's four steps are still
inherited, and drawn grey, because nothing calls them.

Rules this file keeps:
  * Nothing is typed that the code can say: each step's class is found by
    the method resolution order of the loop class (the first class whose
    ``__dict__`` holds the name), the selector's class by making the
    default one, the handle's by the loop's ``call_soon``.  The C functions
    of libuv's phases, which Python cannot see, are named here and looked
    up in the .pyx sources: a renamed one fails the build.
  * The figure is a stock ``sphinx.ext.graphviz`` node; this file only
    writes its ``dot`` source.
"""

from __future__ import annotations

import html
import inspect
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.ext.graphviz import graphviz
from sphinx.util.docutils import SphinxDirective

__all__ = ["aio_steps", "dot_source", "owner", "setup", "uv_steps"]

ROOT = Path(__file__).resolve().parents[2]

# Part II's named iteration: what its run_once calls, in order (tinyloop/callbacks/loop.py).
FOUR_STEPS = ("_compute_timeout", "_process_events", "_move_due_timers", "_run_ready")

# tinyloop.uv's run_once is uv_run: libuv's phases, and the C function each calls
# (libuv's design page, "The I/O loop"), checked against the .pyx sources.
UV_PHASES = (
    ("timers", "_on_timer", "timers.pyx", "due timers onto the ready queue"),
    ("idle", "_on_idle", "_loop.pyx", "runs the ready queue (UVLoop._run_ready, C)"),
    ("poll", "_on_read", "tcp.pyx", "a socket's bytes to protocol.data_received"),
    ("poll", "_on_poll", "poll.pyx", "a watched descriptor's reader or writer"),
    ("check", "_on_check", "_loop.pyx", "sends the writes the turn queued"),
)


def owner(cls: type, name: str) -> type:
    """The class in ``cls``'s method resolution order whose own ``__dict__`` holds ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    raise ExtensionError(f"loop-map: {cls.__qualname__} has no {name!r}")


def _where(klass: type) -> str:
    """``klass``'s file relative to the repository, or its module for a C class."""
    try:
        path = Path(inspect.getfile(klass)).resolve()
    except TypeError:  # a built-in class
        return klass.__module__
    if path.suffix != ".py":  # an extension module: name its Cython source
        path = path.with_name(path.name.split(".")[0] + ".pyx")
        return f"{path.relative_to(ROOT)} (C)"
    return str(path.relative_to(ROOT))


def aio_steps() -> list[tuple[type, str, str]]:
    """tinyloop.aio's iteration as (supplying class, step, what it does), in the order it runs."""
    from tinyloop.aio import unix_events
    from tinyloop.aio.selector_events import _SelectorSocketTransport

    loop_class = unix_events.SelectorEventLoop
    loop = loop_class()
    try:
        selector = type(loop._selector)
        handle = type(loop.call_soon(lambda: None))
    finally:
        loop.close()
    return [
        (owner(loop_class, "run_forever"), "run_forever", "sets the running loop, repeats run_once"),
        (owner(loop_class, "run_once"), "run_once", "the four steps, in order"),
        (owner(loop_class, "_compute_timeout"), "1 _compute_timeout", "how long select may block"),
        (owner(selector, "select"), "2 select", "the injected selector waits (epoll_wait)"),
        (owner(loop_class, "_process_events"), "3 _process_events", "ready descriptors' handles queued"),
        (owner(loop_class, "_move_due_timers"), "3 _move_due_timers", "due timers queued"),
        (owner(loop_class, "_run_ready"), "4 _run_ready", "runs what is ready now"),
        (owner(handle, "_run"), "handle._run", "the callback, in its contextvars.Context"),
        (owner(_SelectorSocketTransport, "_read_ready__data_received"), "_read_ready__data_received",
         "recv, then protocol.data_received"),
    ]


def uv_steps() -> tuple[list[tuple[type, str, str]], list[tuple[type, str, str]]]:
    """tinyloop.uv's iteration, and Part II's steps it inherits but never calls.

    Raises ExtensionError if a phase's C function is not in its .pyx file.
    """
    from tinyloop.uv.loop import Loop

    c_base = owner(Loop, "run_once")
    steps = [(owner(Loop, "run_forever"), "run_forever", "sets the running loop, calls run_once once"),
             (c_base, "run_once", "uv_run(UV_RUN_DEFAULT) until stop(): libuv's phases")]
    for phase, function, source, what in UV_PHASES:
        text = (ROOT / "tinyloop" / "uv" / source).read_text()
        if not re.search(rf"^cdef void {function}\(", text, re.M):
            raise ExtensionError(f"loop-map: tinyloop/uv/{source} has no {function}")
        steps.append((c_base, f"{phase}: {function}", f"{source}: {what}"))
    unused = [(owner(Loop, name), name, "inherited, not called") for name in FOUR_STEPS]
    return steps, unused


def _label(klass: type, rows: list[tuple[int, str, str, bool]]) -> str:
    cells = [f'<tr><td bgcolor="#e8eef7"><b>{html.escape(klass.__qualname__)}</b><br/>'
             f'<font point-size="9">{html.escape(_where(klass))}</font></td></tr>']
    for port, step, what, live in rows:
        colour = "black" if live else "#999999"
        cells.append(f'<tr><td port="p{port if port >= 0 else "mro"}" align="left"><font color="{colour}">'
                     f'<b>{html.escape(step)}</b> <font point-size="9">{html.escape(what)}</font>'
                     f'</font></td></tr>')
    return '<<table border="0" cellborder="1" cellspacing="0" cellpadding="4">' + "".join(cells) + "</table>>"


def dot_source(steps: list[tuple[type, str, str]], unused: list[tuple[type, str, str]] = (),
               order: tuple[type, ...] = ()) -> str:
    """Graphviz source: a box per class, a row per step, an arrow from each step to the next."""
    classes: list[type] = [order[0]] if order else []  # the class a program makes, first
    for klass in [*order, *(k for k, _, _ in [*steps, *unused])]:
        if klass not in classes and any(k is klass for k, _, _ in [*steps, *unused]):
            classes.append(klass)
    rows: dict[type, list[tuple[int, str, str, bool]]] = {klass: [] for klass in classes}
    if order:
        ours = " → ".join(k.__qualname__ for k in order if k.__module__.startswith("tinyloop"))
        rows[order[0]].append((-1, "resolution order:", ours, True))
    for port, (klass, step, what) in enumerate(steps):
        rows[klass].append((port, step, what, True))
    for port, (klass, step, what) in enumerate(unused, start=len(steps)):
        rows[klass].append((port, step, what, False))
    lines = ["digraph loop_map {", '  graph [rankdir=TB, nodesep=0.3, ranksep=0.35, fontname="sans-serif"];',
             '  node [shape=plain, fontname="sans-serif", fontsize=11];',
             '  edge [color="#2a6db0", arrowsize=0.7, fontname="sans-serif", fontsize=9];']
    for index, klass in enumerate(classes):
        lines.append(f"  c{index} [label={_label(klass, rows[klass])}];")
    for upper, lower in zip(range(len(classes)), range(1, len(classes))):
        lines.append(f"  c{upper} -> c{lower} [style=invis];")  # the resolution order, top to bottom
    where = {port: classes.index(klass) for port, (klass, _, _) in enumerate(steps)}
    for port in range(1, len(steps)):
        lines.append(f"  c{where[port - 1]}:p{port - 1}:e -> c{where[port]}:p{port}:e "
                     f"[constraint=false];")
    lines.append("}")
    return "\n".join(lines)


class LoopMap(SphinxDirective):
    """``{loop-map} aio`` or ``{loop-map} uv``: the figure, with a caption saying how it was drawn."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        which = self.arguments[0]
        if which == "aio":
            from tinyloop.aio.unix_events import SelectorEventLoop
            steps, unused, order = aio_steps(), [], SelectorEventLoop.__mro__
            caption = ("tinyloop.aio: one iteration, by the class that supplies each step "
                       "(drawn from the classes' method resolution order when the book is built).")
        elif which == "uv":
            try:
                from tinyloop.uv.loop import Loop
            except ImportError as error:
                return [nodes.paragraph(text=f"(tinyloop.uv is not built here, so its map is not drawn: {error})")]
            (steps, unused), order = uv_steps(), Loop.__mro__
            caption = ("tinyloop.uv: run_once is the C base's (first in the method resolution order) and "
                       "hands the thread to libuv; Part II's four steps, grey, are inherited and never called.")
        else:
            raise self.error(f"loop-map: 'aio' or 'uv', not {which!r}")
        node = graphviz()
        node["code"] = dot_source(steps, unused, order)
        node["options"] = {"docname": self.env.docname}
        node["alt"] = caption
        figure = nodes.figure("", node, nodes.caption(text=caption))
        figure["align"] = "center"
        return [figure]


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.graphviz")
    app.add_directive("loop-map", LoopMap)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
