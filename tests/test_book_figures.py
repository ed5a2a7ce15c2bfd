"""The book's figures drawn from traces (docs/_ext/trace_figures.py and the
{trace-figure} and {quiz} directives of docs/_ext/book_trace.py): every
chapter of Parts 0-V has one; a figure traced at build time is the same
on every build and a valid Chrome trace; a recorded one is committed and
valid; the directives put an SVG, its caption and its command on the page,
and an unknown name breaks the build.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinyloop.trace import chrome

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
try:
    import trace_figures  # beside the directive that draws the figures
finally:
    sys.path.remove(str(ROOT / "docs" / "_ext"))
CHAPTERS = ROOT / "chapters"
# The chapters of Parts 0-V, each of which must show at least one trace.
PARTS = ("baselines", "readiness", "callbacks", "generators", "coroutines", "asyncio", "libuv", "realworld")
DIRECTIVE = re.compile(r"^```\{trace-figure\}\s+(\S+)", re.MULTILINE)


def figures_by_chapter() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(CHAPTERS.rglob("*.md")):
        # chapters/realworld/*.md are sections of realworld.md, included by it.
        chapter = path.parent.name if path.parent != CHAPTERS else path.stem
        found.setdefault(chapter, set()).update(DIRECTIVE.findall(path.read_text()))
    return found


def test_every_chapter_of_parts_0_to_v_shows_a_trace():
    found = figures_by_chapter()
    missing = [chapter for chapter in PARTS if not found.get(chapter)]
    assert missing == [], f"chapters with no {{trace-figure}}: {missing}"


def test_every_figure_a_chapter_names_exists_and_belongs_to_it():
    for chapter, names in figures_by_chapter().items():
        for name in names:
            figure = trace_figures.get(name)
            assert figure.chapter == chapter, f"{name} is declared for {figure.chapter}, shown in {chapter}"


@pytest.mark.parametrize("figure", [f for f in trace_figures.FIGURES if f.source == "build"], ids=lambda f: f.name)
def test_a_build_figure_is_the_same_on_every_build_and_a_valid_trace(figure):
    first, second = figure.make(), figure.make()
    assert first == second, "a figure traced on the virtual clock must not change between builds"
    assert chrome.problems(first) == []
    drawn = figure.drawn(first)
    assert chrome.problems(drawn) == []
    assert any(event["ph"] == "X" for event in drawn["traceEvents"]), "nothing left to draw"


def test_every_shown_reference_figure_is_committed_and_valid():
    shown = set().union(*figures_by_chapter().values())
    for figure in trace_figures.FIGURES:
        if figure.source != "reference" or figure.name not in shown:
            continue
        assert figure.reference_file.exists(), f"record it: {figure.command}"
        trace = json.loads(figure.reference_file.read_text())
        assert chrome.problems(trace) == []
        assert any(event["ph"] == "X" for event in figure.drawn(trace)["traceEvents"])
        if figure.facts is not None:   # the caption's numbers are read off the trace
            facts = figure.facts(figure.drawn(trace))
            assert re.search(r"\d", facts) and "?" not in facts, facts


@pytest.mark.parametrize("figure", [f for f in trace_figures.FIGURES if f.shows], ids=lambda f: f.name)
def test_a_figure_draws_whole_what_its_caption_points_at(figure):
    trace = trace_figures.trace_of(figure)
    if trace is None:
        pytest.skip(f"not recorded: {figure.command}")
    drawn = figure.drawn(trace)["traceEvents"]
    for name in figure.shows:
        whole = [e for e in drawn if e.get("ph") in ("X", "i") and name in (e["name"], e.get("cat"))
                 and not (e.get("args") or {}).get("clipped")]
        assert whole, f"{figure.name}: its caption points at {name!r}, which the window cuts or leaves out"


def test_the_stall_figure_is_the_stall_and_what_waited_behind_it():
    figure = trace_figures.get("callbacks-stall")
    drawn = figure.drawn(json.loads(figure.reference_file.read_text()))["traceEvents"]
    callbacks = sorted((e for e in drawn if e.get("cat") == "callback"), key=lambda e: e["ts"])
    longest = max(callbacks, key=lambda e: e["dur"])
    assert longest["dur"] >= 50_000 and not longest.get("args", {}).get("clipped")
    behind = [e for e in callbacks if e["ts"] > longest["ts"]]
    assert len(behind) >= 2, "the other clients' callbacks, after the stall"
    assert all(e["dur"] < 5_000 for e in behind), "recorded with the load in another process: no 5 ms GIL waits"


def test_the_readiness_facts_compare_the_two_servers():
    figure = trace_figures.get("readiness-idle")
    facts = figure.facts(figure.drawn(json.loads(figure.reference_file.read_text())))
    assert facts.startswith("select: ") and "; epoll: " in facts, facts


def test_the_iteration_figure_shows_soon_then_io_then_the_timer():
    trace = trace_figures.get("callbacks-iteration").make()
    callbacks = [e["name"] for e in sorted(trace["traceEvents"], key=lambda e: e.get("ts", 0))
                 if e.get("cat") == "callback"]
    assert callbacks == ["call_soon_cb", "on_readable", "call_later_0", "later_300us"]


def test_the_pipelined_figure_reads_once_and_writes_once():
    trace = trace_figures.get("realworld-pipelined").make()
    reads = [e for e in trace["traceEvents"] if e.get("name") == "read" and e.get("args", {}).get("bytes")]
    writes = [e for e in trace["traceEvents"] if e.get("name") == "write"]
    assert len(reads) == 1 and reads[0]["args"]["syscalls"] == 1
    assert len(writes) == 1 and writes[0]["args"]["syscalls"] == 1
    assert writes[0]["args"]["bytes"] > 24 * 100, "the 24 answers, joined"


def test_the_generators_figure_climbs_and_unwinds_the_stack():
    trace = trace_figures.get("generators-stack").make()
    depths = [e["args"]["depth"] for e in sorted(trace["traceEvents"], key=lambda e: e.get("ts", 0))
              if e.get("name") == "stack depth (main)"]
    peak = depths.index(max(depths))
    assert depths[:peak + 1] == sorted(depths[:peak + 1]) and depths[peak:] == sorted(depths[peak:], reverse=True)
    assert max(depths) - min(depths[:peak + 1]) == 3, "outer, middle, inner: three calls deep"
    assert depths[-1] == 0


def _trace(*events):
    meta = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}
            for tid, name in ((1, "loop"), (2, "task a"))]
    return {"traceEvents": meta + list(events)}


def test_window_clips_spans_drops_outside_and_forgets_empty_tracks():
    trace = _trace({"name": "wait", "ph": "X", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
                   {"name": "step", "ph": "X", "ts": 150, "dur": 10, "pid": 1, "tid": 2},
                   {"name": "q", "ph": "C", "ts": 10, "pid": 1, "tid": 1, "args": {"n": 3}})
    cut = trace_figures.window(trace, 50, 120)
    spans = [e for e in cut["traceEvents"] if e["ph"] == "X"]
    assert spans == [{"name": "wait", "ph": "X", "ts": 50, "dur": 50, "pid": 1, "tid": 1,
                      "args": {"clipped": True}}]
    assert [e["args"]["name"] for e in cut["traceEvents"] if e["ph"] == "M"] == ["loop"]
    assert [(e["ts"], e["args"]) for e in cut["traceEvents"] if e["ph"] == "C"] == [(50, {"n": 3})]
    assert not [e for e in trace_figures.window(trace, 50, 120, carry=False)["traceEvents"] if e["ph"] == "C"]


def test_select_tracks_keeps_tracks_and_counters_by_prefix():
    trace = _trace({"name": "wait", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1},
                   {"name": "step", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 2},
                   {"name": "ready queue", "ph": "C", "ts": 0, "pid": 1, "tid": 1, "args": {"n": 1}},
                   {"name": "stack depth (a)", "ph": "C", "ts": 0, "pid": 1, "tid": 1, "args": {"n": 1}})
    kept = trace_figures.select_tracks(trace, ("task",), ("stack",))
    assert {e["name"] for e in kept["traceEvents"] if e["ph"] != "M"} == {"step", "stack depth (a)"}


def test_the_command_writes_under_local_unless_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_figures, "LOCAL", tmp_path / "local")
    monkeypatch.setattr(trace_figures, "REFERENCE", tmp_path / "reference")
    assert trace_figures.main(["callbacks-iteration"]) == 0
    assert (tmp_path / "local" / "callbacks-iteration.json").exists()
    assert (tmp_path / "local" / "callbacks-iteration.html").exists()
    # --reference writes only recorded figures: a build figure is never committed.
    assert trace_figures.main(["--reference", "callbacks-iteration"]) == 0
    assert not (tmp_path / "reference").exists()
    assert trace_figures.main(["no-such-figure"]) == 2


def test_a_quick_run_writes_the_build_figures_under_local_only() -> None:
    # As a new user types it: --quick (the virtual-clock figures), no --out; nothing committed changes.
    committed = ["git", "status", "--porcelain", "--", "benchmarks/results"]
    before = subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout
    done = subprocess.run([sys.executable, "docs/_ext/trace_figures.py", "--quick"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    build = [f for f in trace_figures.FIGURES if f.source == "build"]
    assert done.stdout.rstrip().splitlines()[-1].startswith(f"trace figures: {len(build)} of {len(build)} written")
    assert subprocess.run(committed, cwd=ROOT, capture_output=True, text=True).stdout == before
    assert all((trace_figures.LOCAL / f"{f.name}.json").exists() for f in build)
    with pytest.raises(SystemExit):
        trace_figures.main(["--quick", "--reference"])


def _build(tmp_path: Path, page: str) -> subprocess.CompletedProcess:
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'docs' / '_ext')!r}]\n"
        "extensions = ['myst_parser', 'sphinx_design', 'book_trace']\n"
        "myst_enable_extensions = ['colon_fence']\n")
    (source / "index.md").write_text(page)
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(source),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_directives_draw_the_trace_with_its_caption_and_command(tmp_path):
    done = _build(tmp_path, "# Figures\n\n```{trace-figure} coroutines-tasks\nTasks, *traced*.\n```\n\n"
                            "```{quiz} first_step\n```\n")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "html" / "index.html").read_text()
    assert page.count('<div class="timeline"') == 2, "the figure's and the quiz's"
    assert '<pre class="book-trace-steps">' in page and "text-align: left" in page, "the trace as text, left-aligned"
    assert "Tasks, <em>traced</em>." in page
    text = re.sub(r"<[^>]+>", "", page)
    assert "python docs/_ext/trace_figures.py coroutines-tasks" in text
    assert "step main -&gt; awaits Task sleeper" in text, "the trace as text, below the picture"
    assert "python -m tinyloop quiz first_step" in text and "<details" in page
    assert "shutdown_default_executor" not in page, "the quiz's timeline stops after its last printed line"


@pytest.mark.slow  # a second Sphinx build; the one above runs in the default step
def test_an_unknown_figure_breaks_the_build(tmp_path):
    done = _build(tmp_path, "# Figures\n\n```{trace-figure} no-such-figure\n```\n")
    assert done.returncode != 0
    assert "no trace figure 'no-such-figure'" in done.stderr
