# benchmarks/harness/output.py
"""The one output rule: a run writes under ``benchmarks/results/local/`` (ignored by git), or
where ``--out`` says but never into the committed folder; only ``--reference`` (a full run, not
``--quick``) writes the book's reference in ``benchmarks/results/``.  Other files go beside the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness.machine import ROOT

__all__ = ["LOCAL", "RESULTS", "add_arguments", "json_path", "minutes", "print_and_write", "relative", "write_json",
           "write_text"]

RESULTS = ROOT / "benchmarks" / "results"   # the book's reference results, committed
LOCAL = RESULTS / "local"                   # every other run's, ignored by git


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """Give ``parser`` the output rule's two options, for an experiment whose JSON is ``name``."""
    parser.add_argument("--reference", action="store_true",
                        help=f"maintainers: write the book's committed benchmarks/results/{name} "
                             "(a full run; not with --quick or --out)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where to write the JSON (default benchmarks/results/local/{name}); "
                             "its other files go beside it")


def json_path(parser: argparse.ArgumentParser, args: argparse.Namespace, name: str) -> Path:
    """Where this run writes its JSON ``name``, by the rule above; ``parser.error`` (exit 2) if refused."""
    quick = getattr(args, "quick", False)
    if args.reference:
        if args.out is not None or quick:
            parser.error(f"--reference writes benchmarks/results/{name} from a full run: "
                         "not with --out or --quick")
        return RESULTS / name
    if args.out is None:
        return LOCAL / name
    out = args.out.resolve()
    if out.parent == RESULTS.resolve():
        parser.error(f"--out {args.out}: the committed folder benchmarks/results/ is written "
                     "only with --reference")
    return out


def write_json(data: dict, path: Path, *, keep_copy: bool = False) -> Path:
    """Write ``data`` as JSON (indented, UTF-8, a final newline) to ``path``; returns ``path``.
    ``keep_copy`` also writes a copy named by ``data["date"]`` into ``path``'s ``runs/`` folder."""
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    if keep_copy:
        stamp = data["date"].replace(":", "").replace("+0000", "Z")
        write_text(text, path.parent / "runs" / f"{path.stem}-{stamp}.json")
    return write_text(text, path)


def write_text(text: str, path: Path) -> Path:
    """Write ``text`` to ``path``, making its folder; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def print_and_write(text: str, path: Path) -> int:
    """Print ``text`` (a profile, a count: a run's side product), write it to ``path``, say where;
    returns 0, the command's exit status."""
    print(text, end="" if text.endswith("\n") else "\n")
    print(f"wrote {relative(write_text(text, path))}")
    return 0


def relative(path: Path) -> str:
    """``path`` from the current directory where it is under it, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def minutes(seconds: float) -> str:
    """A duration for a progress line: ``"95 s"`` or ``"2.5 min"`` (from 90 s on)."""
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"
