"""A chapter quotes only numbers its own results contain (issue 26, "one set of numbers").

Each chapter shows some committed results: the tables and charts of the ``{bench-*}`` directives,
the Markdown tables and text outputs it includes from ``benchmarks/results/``, the
``{results-chart}`` figures and the ``{result}`` numbers of ``docs/_ext/book_numbers.py``.  Those
files are the chapter's references.  Every measured number typed in its prose (a figure with a
unit of time, rate, ratio or share: µs, ms, ns, req/s, messages/s, MiB/s, %, ×, "times") must be
one of theirs within rounding (the digits the prose shows), or a constant of the code or of an
experiment's set-up listed in ``CONSTANTS`` with its reason.  A number from an older run, from a
one-off measurement or from another Part's file fails here; it belongs in
``benchmarks/README.md``'s changelog, or in the prose through ``{result}``.

Rules this test keeps:
  * The references are found from the chapter itself, never from a list kept here: a chapter
    that starts showing a new file may quote it.
  * A ``{result}`` reference must resolve: the build would fail on it anyway, and this finds it
    in a second without a build.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
try:
    import book_numbers
finally:
    sys.path.remove(str(ROOT / "docs" / "_ext"))

# The directive -> the committed file it renders (docs/_ext/book_bench.py, book_echo.py).
DIRECTIVE_FILES = {"bench-table": "latest.json", "bench-chart": "latest.json", "bench-plot": "latest.json",
                   "bench-journey": "latest.json", "bench-echo": "echo.json", "bench-micro": "micro.json",
                   "bench-fairness": "fairness.json", "bench-idle": "idle.json"}

# Numbers with a unit that are not measurements: constants of the code, the kernel or an
# experiment's set-up.  (chapter, the text as the prose writes it) -> why it may be typed.
CONSTANTS = {
    ("callbacks", "100 ms"): "slow_callback_duration's default, asyncio's and ours",
    ("callbacks", "50 ms"): "the /compute?ms=50 handler the trace asks for",
    ("coroutines", "50 ms"): "benchmarks/fairness.py's compute handler (compute_ms: 50)",
    ("coroutines", "5 ms"): "sys.getswitchinterval()'s default",
    ("coroutines", "100 ms"): "slow_callback_duration's default",
    ("coroutines", "1 ms"): "compute_cooperatively's slice",
    ("readiness", "500 ms"): "nginx's accept_mutex_delay default",
    ("benchmarks", "25%"): "the harness's NOISE rule (benchmarks/harness/summary.py)",
    ("realworld/tornado", "10 ms"): "the kernel's clock tick, the unit of /proc's CPU counts",
}

_FENCE = re.compile(r"^(```+|:::+)", re.MULTILINE)
_NUMBER = re.compile(
    r"(?<![\w.,/-])(?P<prefix>×\s?)?(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<unit>\s?(?:µs|ms|ns|req/s|requests/s|messages/s|MiB/s|%|×)(?![\w/])|\s(?:times)\b)?")


def prose(text: str) -> str:
    """The chapter's running text: fenced blocks, inline code, roles' targets and link addresses
    dropped (a fenced directive's body is a listing, a table file or a caption the directive
    checks)."""
    kept, inside = [], None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if inside is None and fence and ("{" in line or line.startswith("```")):
            if line.startswith(":::") and "{" in line and not any(
                    name in line for name in ("literalinclude", "include", "trace-figure", "bench", "results")):
                continue  # an admonition's opening line: its body is prose
            if not line.rstrip().endswith(fence.group(1)) or line.strip() == fence.group(1):
                inside = fence.group(1)
            continue
        if inside is not None:
            if line.strip() == inside:
                inside = None
            continue
        kept.append(line)
    body = "\n".join(kept)
    body = re.sub(r"\{[\w-]+\}`[^`]*`", " ", body)       # roles: {result}`...`, {manpage}`...`
    body = re.sub(r"`[^`]*`", " ", body)                 # inline code
    body = re.sub(r"\]\([^)]*\)", "]", body)             # link addresses
    return body


def references(text: str) -> list[str]:
    """The results files a chapter shows, by name under benchmarks/results/."""
    names = set()
    for directive, name in DIRECTIVE_FILES.items():
        if re.search(r"^```\{" + re.escape(directive) + r"\}", text, re.MULTILINE):
            names.add(name)
    for name in re.findall(r"benchmarks/results/([\w.-]+\.(?:md|txt|json))", text):
        names.add(name)
        if (RESULTS / (Path(name).stem + ".json")).exists():
            names.add(Path(name).stem + ".json")
    names.update(re.findall(r"^```\{results-chart\}\s+(\S+)", text, re.MULTILINE))
    names.update(re.findall(r"\{result\}`([^:`]+):", text))
    return sorted(name for name in names if (RESULTS / name).exists())


# Which fields of a JSON may hold a figure with this unit (matched against every key on the way
# down).  A ratio or a share may be any field.  The ``runs`` lists (single repetitions) are not
# read: the prose quotes a row's median or its spread, never one repetition.
UNIT_FIELDS = {"µs": r"us|µs|cpu", "ms": r"ms|latency", "ns": r"ns", "req/s": r"rps|rate|per_s",
               "requests/s": r"rps|rate|per_s", "messages/s": r"msgs|rate|per_s", "MiB/s": r"mib",
               "×": r"ratio|speedup|share", "times": r"ratio|speedup|share",
               "%": r"ratio|speedup|share|noise|percent"}


def _numbers(value: object, path: tuple[str, ...], unit: str) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        fields = UNIT_FIELDS.get(unit)
        return [float(value)] if fields is None or any(re.search(fields, key) for key in path) else []
    if isinstance(value, dict):
        return [number for key, item in value.items() if key != "runs"
                for number in _numbers(item, (*path, str(key).lower()), unit)]
    if isinstance(value, list):
        return [number for item in value for number in _numbers(item, path, unit)]
    return []


def _text_numbers(text: str) -> list[float]:
    return [float(match.replace(",", "")) for match in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def reference_numbers(names: list[str], unit: str = "") -> list[float]:
    """Every number of the files ``names`` that may carry ``unit`` (all of a text file's)."""
    found: list[float] = []
    for name in names:
        text = (RESULTS / name).read_text(encoding="utf-8")
        found += _numbers(json.loads(text), (), unit) if name.endswith(".json") else _text_numbers(text)
    return found


def within_rounding(quoted: str, values: list[float], percent: bool = False) -> bool:
    """True if some value, rounded to the digits ``quoted`` shows, is ``quoted`` (a share may be
    stored as a fraction: 0.125 for "12.5%")."""
    target = float(quoted.replace(",", ""))
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    candidates = values + [value * 100 for value in values] if percent else values
    return any(round(value, decimals) == round(target, decimals) for value in candidates)


def unmatched(chapter: str, text: str) -> list[str]:
    """The measured numbers ``text`` quotes that its references do not contain."""
    names = references(text)
    wrong = []
    for match in _NUMBER.finditer(prose(text)):
        unit = (match.group("unit") or "").strip()
        if not unit and not match.group("prefix"):
            continue
        quoted = match.group("number")
        said = f"{quoted} {unit}".strip() if unit not in ("%", "×") else f"{quoted}{unit}"
        if (chapter, said) in CONSTANTS or (chapter, quoted) in CONSTANTS:
            continue
        if not within_rounding(quoted, reference_numbers(names, unit or "×"), percent=unit == "%"):
            wrong.append(said)
    # A Markdown table typed into the chapter: every decimal or thousands figure in it is a
    # measurement (a table of the results is included from its file, never typed).
    for row in (line for line in prose(text).splitlines() if line.lstrip().startswith("|")):
        for quoted in re.findall(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+\.\d+)(?![\w.,])", row):
            if not within_rounding(quoted, reference_numbers(names, "")):
                wrong.append(quoted)
    return wrong


def chapters() -> list[Path]:
    return sorted(path for path in CHAPTERS.rglob("*.md") if "api" not in path.relative_to(CHAPTERS).parts)


def chapter_name(path: Path) -> str:
    return path.relative_to(CHAPTERS).with_suffix("").as_posix()


@pytest.mark.parametrize("path", chapters(), ids=chapter_name)
def test_a_chapter_quotes_only_numbers_its_results_contain(path: Path) -> None:
    wrong = unmatched(chapter_name(path), path.read_text(encoding="utf-8"))
    assert wrong == [], (f"{chapter_name(path)} quotes numbers that none of its results files "
                         f"({', '.join(references(path.read_text(encoding='utf-8'))) or 'none'}) contains: "
                         f"{wrong}; render them with {{result}}`FILE:PATH`, or move them to "
                         "benchmarks/README.md's changelog")


def test_every_constant_is_still_quoted() -> None:
    # A constant nobody quotes any more goes, so the list cannot hide a number by accident.
    quoted = set()
    for path in chapters():
        for match in _NUMBER.finditer(prose(path.read_text(encoding="utf-8"))):
            unit = (match.group("unit") or "").strip()
            number = match.group("number")
            quoted.add((chapter_name(path), f"{number} {unit}".strip() if unit not in ("%", "×") else number + unit))
    assert set(CONSTANTS) - quoted == set()


@pytest.mark.parametrize("path", chapters(), ids=chapter_name)
def test_every_result_reference_resolves_to_a_number_or_text(path: Path) -> None:
    for reference in re.findall(r"\{result\}`([^`]+)`", path.read_text(encoding="utf-8")):
        value, spec = book_numbers.resolve(reference)
        assert book_numbers.render(value, spec), reference


def test_the_check_catches_a_number_from_another_run_and_passes_the_committed_one() -> None:
    echo = json.loads((RESULTS / "echo.json").read_text(encoding="utf-8"))
    committed = echo["results"]["102400"]["asyncio-protocol"]["cpu_us_per_msg"]
    page = ("```{bench-echo}\n:size: 100\n```\n\n"
            f"asyncio costs {committed:.1f} µs per message; another run said OTHER µs.\n")
    # A figure in no committed file: past the largest µs figure echo.json holds.
    other = f"{max(reference_numbers(['echo.json'], 'µs')) + 1:.1f}"
    assert unmatched("x", page.replace("OTHER", other)) == [f"{other} µs"]
    assert unmatched("x", page.replace("OTHER", f"{committed:.1f}")) == []
    # The same number is not accepted where the chapter shows no file that has it.
    assert unmatched("x", f"asyncio costs {committed:.1f} µs per message.\n") == [f"{committed:.1f} µs"]


def test_numbers_inside_listings_roles_and_code_are_not_prose() -> None:
    page = ("```{literalinclude} ../benchmarks/results/profile.txt\n:caption: 155 us\n```\n\n"
            "Run `wrk -d 5s` for {result}`echo.json:date` and see [it](https://x/9.9ms).\n")
    assert unmatched("x", page) == []


def test_a_result_reference_reads_the_committed_file_and_refuses_a_bad_path() -> None:
    data = json.loads((RESULTS / "uv_changes.json").read_text(encoding="utf-8"))
    row = next(r for r in data["rows"] if r["load"] == "wrk-pipeline" and r["step"] == "uv/no-batching")
    value, spec = book_numbers.resolve("uv_changes.json:rows/[load=wrk-pipeline,step=uv/no-batching]/cpu_us/min|.2f")
    assert value == row["cpu_us"]["min"] and book_numbers.render(value, spec) == f"{row['cpu_us']['min']:.2f}"
    assert book_numbers.render(92968.7) == "92,969" and book_numbers.render(12.46) == "12.5"
    with pytest.raises(KeyError):
        book_numbers.resolve("uv_changes.json:rows/[load=wrk]/cpu_us")  # four rows match, not one
    with pytest.raises(KeyError):
        book_numbers.resolve("echo.json:results/1024/no-such-server")
    with pytest.raises(ValueError):
        book_numbers.resolve("echo.json")
    # A key with a / in it is written [key]; without the brackets it is two steps.
    counts = json.loads((RESULTS / "instructions_requests.json").read_text(encoding="utf-8"))["counts"]
    assert book_numbers.resolve("instructions_requests.json:counts/[ring/python]/keepalive")[0] == \
        counts["ring/python"]["keepalive"]
    with pytest.raises(KeyError):
        book_numbers.resolve("instructions_requests.json:counts/ring/python/keepalive")
