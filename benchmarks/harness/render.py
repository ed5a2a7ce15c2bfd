# benchmarks/harness/render.py
"""One renderer: an experiment's ``(header, rows)`` of strings as aligned text or Markdown (the
book's directives take the same pair), and the caption line.  Standard library only, no I/O."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DASH", "LOAD_NOTE", "align", "cell", "describe_machine", "footer", "machine_line", "markdown", "median_cell", "number",
           "quick_caption", "spread_cell"]

DASH = "—"
# After a run's load average: what it counts (the run's own server and load generator too).
LOAD_NOTE = "the run's own processes count in it"


def number(value: float | None, digits: int = 0) -> str:
    """``1234.5`` -> ``"1,234"`` (``digits`` decimals, thousands separated); None -> a dash."""
    return DASH if value is None else f"{value:,.{digits}f}"


def cell(value: float | None, digits: int = 0, ratio: float | None = None) -> str:
    """A figure with its ratio to the baseline in parentheses when there is one: ``"8,123 (1.32×)"``."""
    text = number(value, digits)
    return f"{text} ({ratio:.2f}×)" if ratio is not None and value is not None else text


def spread_cell(low_high: Iterable[float] | None, noisy: bool, digits: int = 0) -> str:
    """``[min, max]`` as ``"7,900–8,300"``, followed by ``noisy`` when the row is; a dash without."""
    if not low_high:
        return DASH
    low, high = low_high
    return f"{number(low, digits)}–{number(high, digits)}" + (" noisy" if noisy else "")


def median_cell(summary: dict | None, digits: int = 0, missing: str = "failed") -> str:
    """``{"median", "min", "max"}`` (summary.summarize's) as ``"7.0 (6.5–7.4)"``; ``missing`` without."""
    if not summary or summary.get("median") is None:
        return missing
    return f"{summary['median']:.{digits}f} ({summary['min']:.{digits}f}–{summary['max']:.{digits}f})"


def align(header: list[str], rows: list[list[str]]) -> list[str]:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [text.rjust(width) for text, width in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def markdown(header: list[str], rows: list[list[str]], numeric_from: int = 1) -> list[str]:
    """A Markdown table: columns from ``numeric_from`` on right-aligned (numbers), the others left; ``|`` escaped."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |"
    return [line(header), "|" + "---|" * numeric_from + "---:|" * (len(header) - numeric_from),
            *(line(row) for row in rows)]


def describe_machine(data: dict) -> str:
    """Where and how the numbers were measured, for captions: ``"AMD EPYC, 2 CPUs, Linux 6.1, CPython
    3.11.2; server on CPU 0, load on CPU 1; median of 3; load average 1.2; 2026-01-31"``, from the
    JSON's ``machine`` (or an older file's line of text), ``pinning``, ``settings``, ``load_average``."""
    pinning = data.get("pinning") or {}
    settings = data.get("settings") or {}
    where = (f"server on CPU {pinning.get('server_cpus')}, load on CPU {pinning.get('load_cpus')}"
             if pinning.get("enabled") else pinning.get("process") or "unpinned")
    if str(pinning.get("realtime") or "").startswith("chrt"):
        where += ", both at real-time priority"
    repeat = settings.get("repeat")
    how = f"median of {repeat}" if repeat and repeat > 1 else "1 run"
    if settings.get("quick"):
        how += " (--quick: a smoke test, not a measurement)"
    load = data.get("load_average")
    if isinstance(load, list) and load:
        how += f"; load average {max(load):.1f} ({LOAD_NOTE})"
    return f"{machine_line(data)}; {where}; {how}; {str(data.get('date', ''))[:10]}"


def quick_caption(data: dict) -> list[str]:
    """A Markdown table's first lines for a ``--quick`` run (``data["settings"]["quick"]``): that it is a
    smoke run, not a measurement, and a blank line; ``[]`` for a full run."""
    if not (data.get("settings") or {}).get("quick"):
        return []
    return ["*A `--quick` smoke run: too short and too few runs to compare by. The book's figures come "
            "from the full run (`--reference`).*", ""]


def footer(data: dict) -> str:
    """A table's last line: ``"Command: `python -m benchmarks.NAME ...`; "`` and :func:`describe_machine`."""
    return f"Command: `{data.get('command')}`; {describe_machine(data)}."


def machine_line(data: dict) -> str:
    """The JSON's ``machine`` in a few words: ``"AMD EPYC, 2 CPUs, Linux 6.1, CPython 3.11.2"``
    (a line of text, an older file's ``machine``, as it is)."""
    machine = data.get("machine") or {}
    if isinstance(machine, str):
        return machine
    parts = [str(machine.get("cpu_model") or "unknown CPU"), f"{machine.get('cpus')} CPUs",
             f"{machine.get('system') or ''} {machine.get('kernel') or ''}".strip(), str(machine.get("python"))]
    return ", ".join(part for part in parts if part)
