# tests/test_docs.py
#
# The book is part of the product: it must build with warnings as errors, a
# renamed function must break the build (so no listing can drift from the
# code), and no chapter may paste a long Python listing instead of including
# it from the source.  Each build runs in a temporary directory and is
# bounded in time.

from __future__ import annotations

import doctest
import json
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
DOCS = ROOT / "docs"
BUILD_TIMEOUT = 600  # seconds; a build of the whole book takes about 35 s of CPU alone, and three minutes of wall time on a 2-core machine shared with other builds

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")


def sphinx_build(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The book's build command (``python -m tinyloop book``'s), ``source`` as the chapters, into ``out/html``."""
    from tinyloop import book
    cmd = book.sphinx_command(out / "html", *extra, chapters=source)
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT)


def copy_book(tmp_path: Path) -> Path:
    """A copy of chapters/ beside links to the code it includes; returns the copy."""
    chapters = tmp_path / "chapters"
    shutil.copytree(CHAPTERS, chapters, ignore=lambda folder, names: ["api"] if Path(folder) == CHAPTERS else [])
    for name in ("tinyloop", "benchmarks", "examples"):
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    return chapters


def chapter_files() -> list[Path]:
    return sorted(CHAPTERS.glob("*.md"))


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_the_book_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    result = sphinx_build(CHAPTERS, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "html" / "index.html").exists()
    for chapter in chapter_files():
        assert (tmp_path / "html" / f"{chapter.stem}.html").exists(), f"{chapter.name} not built"
    # Every exercise a chapter asks for is on its page, with the commands that start and check it.
    from tinyloop.exercises import catalog
    for chapter in chapter_files():
        for wanted in re.findall(r"^```\{exercises\}\s+(\S+)", chapter.read_text(encoding="utf-8"), re.M):
            page = page_text((tmp_path / "html" / f"{chapter.stem}.html").read_text(encoding="utf-8"))
            for exercise in catalog.by_chapter(wanted):
                assert f"python -m tinyloop start {exercise.name}" in page, (chapter.name, exercise.name)
                assert f"python -m tinyloop check {exercise.name}" in page, (chapter.name, exercise.name)
    # The reader's edition shows every listing whole: each region's telling
    # line is on a page, after a callout that names the command starting it,
    # and no marker comment reaches a page.
    texts = {page.name: _squeeze(page_text(page.read_text(encoding="utf-8")))
             for page in (tmp_path / "html").glob("*.html")}
    for name, text in texts.items():
        assert "#exercise" not in text, f"{name} shows a marker comment"
    lines = solution_lines()
    shown = {name for name, line in lines.items() if any(_squeeze(line) in t for t in texts.values())}
    assert len(shown) >= len(lines) - 1, f"regions not shown whole: {sorted(set(lines) - shown)}"
    for name in shown:
        assert any(_squeeze(f"Try it first: {catalog.get(name).title}") in t.replace("’", "'")
                   and _squeeze(f"python -m tinyloop start {name}") in t for t in texts.values()), \
            f"exercise {name}: no callout before its listing"
    # One callout per exercise on a page, however many of its listings show
    # the region; the checker's internals (pytest's -k expressions) only on
    # the teachers' page.
    for page in (tmp_path / "html").glob("*.html"):
        html = page.read_text(encoding="utf-8")
        twice = [name for name in lines if html.count(f'id="try-{name}"') > 1]
        assert not twice, f"{page.name}: more than one callout for {twice}"
        if page.name != "teachers.html":
            assert not re.search(r"tests/\S+\.py -k ", page_text(html)), \
                f"{page.name} shows the checker's pytest -k expression"
    teachers = page_text((tmp_path / "html" / "teachers.html").read_text(encoding="utf-8"))
    from tinyloop.exercises import checker
    for exercise in catalog.exercises():
        assert " ".join(checker.test_arguments(exercise)) in teachers, f"{exercise.name}: not on the teachers' page"
    # The landing page summarises every Part and draws the journey: a row
    # and a bar (with its whisker) per stage; every table of results has its chart.
    index = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    for part in ("Part 0", "Part I,", "Part II", "Part III", "Part IV", "Part V"):
        assert part in page_text(index), f"the landing page does not summarise {part}"
    assert "book-journey" in index and 'id="book-whisker-' in index, "no journey picture on the landing page"
    for chapter in chapter_files():
        tables = len(re.findall(r"^```\{bench-table\}", chapter.read_text(encoding="utf-8"), re.M))
        charts = (tmp_path / "html" / f"{chapter.stem}.html").read_text(encoding="utf-8").count(
            'class="book-chart-svg"')
        assert charts >= tables, f"{chapter.name}: {tables} result tables, {charts} charts"
    # The API reference has a page for every package, found without naming it.
    import pkgutil

    import tinyloop
    for info in pkgutil.iter_modules(tinyloop.__path__):
        if info.ispkg and (ROOT / "tinyloop" / info.name / "__init__.py").exists():
            assert (tmp_path / "html" / "api" / f"tinyloop.{info.name}.html").exists(), info.name


# A sphinx-design dropdown is an HTML <details> element: closed until clicked.
_DETAILS = re.compile(r"<details\b.*?</details>", re.S)


def _squeeze(text: str) -> str:
    return "".join(text.split())


def solution_lines() -> dict[str, str]:
    """For each exercise, the longest line of its region(s) found nowhere else in its module
    nor in its instructions."""
    from tinyloop.exercises import catalog, markers
    lines = {}
    for exercise in catalog.exercises():
        source = markers.source_path(exercise.module).read_text(encoding="utf-8").splitlines()
        regions = [r for r in markers.find_regions("\n".join(source)) if r.name == exercise.name]
        inside = {i for r in regions for i in range(r.begin, r.end - 1)}
        outside = {_squeeze(source[i]) for i in range(len(source)) if i not in inside}
        asked = _squeeze(exercise.instructions)  # the question may name a call the answer makes
        candidates = [source[i].strip() for i in sorted(inside)
                      if _squeeze(source[i]) not in outside and _squeeze(source[i]) not in asked
                      and not source[i].strip().startswith("#")]
        if candidates:
            lines[exercise.name] = max(candidates, key=len)
    return lines


def assert_class_edition(html_dir: Path) -> None:
    """No page of the build in ``html_dir`` (the API pages and the teachers' page included) holds a
    line of any exercise's region: every region line that gives something away, against every page.

    Which lines give something away is book_solutions.solution_lines()'s rule (a line found nowhere
    in tinyloop outside the regions, 8 characters or more, not a comment); that every exercise has
    some is checked here, so an empty rule cannot pass.
    """
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import book_solutions
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from tinyloop.exercises import catalog
    named = {name for name, _ in book_solutions.solution_lines()}
    assert named == {exercise.name for exercise in catalog.exercises()}, "an exercise without region lines"
    pages = [page for page in html_dir.glob("**/*.html") if ".source" not in page.parts]
    assert any(page.name == "teachers.html" for page in pages)
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "book-try-first" not in html, f"{page.name} has an exercise callout"
        shown = book_solutions.quoted(page_text(html))
        assert not shown, f"{page.name} shows {len(shown)} lines of a solution: {shown[:3]}"
    readiness = page_text((html_dir / "readiness.html").read_text(encoding="utf-8"))
    assert "# exercise partial-writes: left out of this book" in readiness


def solutions_shown(html_dir: Path) -> set[str]:
    """The exercises whose solution line some page of ``html_dir`` shows."""
    texts = [_squeeze(page_text(page.read_text(encoding="utf-8"))) for page in html_dir.glob("*.html")]
    return {name for name, line in solution_lines().items() if any(_squeeze(line) in t for t in texts)}


@pytest.mark.slow  # a whole-book build: about a minute on 2 cores (scripts/test.sh's slow step)
@pytest.mark.timeout(3 * BUILD_TIMEOUT + 30)
def test_the_two_editions_built_in_turn_into_one_folder_do_not_leak(tmp_path: Path) -> None:
    # A reader's build, then a class build into the same folder (same
    # doctrees): Sphinx must re-read the sources, not rewrite the pages from
    # the reader's cached doctrees (that leaked all the solutions once).
    # Then the reader's edition again, which must bring them back.
    chapters = copy_book(tmp_path)
    out = tmp_path / "out"
    for step, extra in (("reader", ()), ("class", ("-t", "class")), ("reader again", ())):
        result = sphinx_build(chapters, out, *extra)
        assert result.returncode == 0, f"{step}: " + result.stdout + result.stderr
        if step == "class":
            assert_class_edition(out / "html")
        else:
            assert len(solutions_shown(out / "html")) >= len(solution_lines()) - 1, step


@pytest.mark.parametrize("tags, env, expected", [
    ((), {}, "reader"), (("class",), {}, "class"),
    ((), {"TINYLOOP_BOOK_SOLUTIONS": "omit"}, "class"), ((), {"TINYLOOP_BOOK_SOLUTIONS": ""}, "reader"),
])
def test_the_edition_follows_the_tags_and_the_environment(
        monkeypatch: pytest.MonkeyPatch, tags: tuple[str, ...], env: dict[str, str], expected: str) -> None:
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import book_solutions
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from types import SimpleNamespace

    from sphinx.util.tags import Tags
    monkeypatch.delenv("TINYLOOP_BOOK_SOLUTIONS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = SimpleNamespace(tags=Tags(list(tags)))
    config = SimpleNamespace(book_edition="reader")
    book_solutions._choose_edition(app, config)
    assert config.book_edition == expected
    assert app.tags.has(expected)


@pytest.mark.slow  # a whole-book build: about a minute on 2 cores (scripts/test.sh's slow step)
@pytest.mark.timeout(BUILD_TIMEOUT + 60)
def test_a_fresh_clone_without_the_extension_builds_the_book(tmp_path: Path) -> None:
    # What a machine without libuv has: the tracked files (no _loop*.so), the
    # book built by `python -m tinyloop book`.  It must pass -W -n, print the
    # page to open, and say on tinyloop.uv's pages that the extension is not
    # built, instead of failing on `import tinyloop.uv._loop`.
    # The build writes only under its output folder: the API pages
    # autosummary generates too (they once went into chapters/api/).
    from conftest import child_env, source_copy
    tree = source_copy(tmp_path / "clone")
    assert not list((tree / "tinyloop" / "uv").glob("_loop*.so"))

    def files() -> dict[Path, int]:
        return {path: path.stat().st_mtime_ns for path in tree.rglob("*") if path.is_file()
                and "__pycache__" not in path.parts and (tree / "docs" / "_build") not in path.parents}
    before = files()
    done = subprocess.run([sys.executable, "-m", "tinyloop", "book"], cwd=tree, env=child_env(tree),
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert files() == before, f"the build wrote outside docs/_build: {sorted(set(files().items()) ^ set(before.items()))[:5]}"
    assert not (tree / "chapters" / "api").exists()
    index = tree / "docs" / "_build" / "html" / "index.html"
    assert f"open {index.as_uri()}" in done.stdout, done.stdout
    page = page_text((index.parent / "api" / "tinyloop.uv.loop.html").read_text(encoding="utf-8"))
    assert "built without tinyloop.uv’s C extension" in page or "built without tinyloop.uv's C extension" in page
    assert "tinyloop.uv.loop.Loop" in page or "class tinyloop.uv.loop. Loop" in page, \
        "the Python class is still documented from its source"


def test_the_book_command_says_how_to_install_sphinx(tmp_path: Path) -> None:
    # Sphinx is a dev dependency: without it the command says what to install.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import importlib.util, sys\n"
                       "_find = importlib.util.find_spec\n"
                       "importlib.util.find_spec = lambda name, *a: None if name == 'sphinx' else _find(name, *a)\n")
    done = subprocess.run([sys.executable, "-m", "tinyloop", "book"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install -e '.[dev]'" in done.stderr


def test_the_book_is_served_on_localhost_only(tmp_path: Path) -> None:
    import threading
    import urllib.request

    from tinyloop import book
    (tmp_path / "index.html").write_text("<p>the book</p>", encoding="utf-8")
    server = book.serve(tmp_path, 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=10) as reply:
            assert b"the book" in reply.read()
    finally:
        server.shutdown()
        server.server_close()


# The option lines of literalinclude that name what they include.
_PYOBJECT = re.compile(r"^(\s*:pyobject:\s*)(\S+)\s*$", re.MULTILINE)
_START_MARKER = re.compile(r"^(\s*:start-(?:after|at):\s*)(\"?)(.+?)\2\s*$", re.MULTILINE)


def _break_first(pattern: re.Pattern[str], chapters: Path) -> str:
    """Rename the first reference matching ``pattern`` in the copied chapters; return its old text.

    The name is the pattern's last group; ``_renamed_away`` is appended to it.
    """
    for path in sorted(chapters.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        match = pattern.search(text)
        if match:
            group = pattern.groups
            broken = text[: match.end(group)] + "_renamed_away" + text[match.end(group):]
            path.write_text(broken, encoding="utf-8")
            return match.group(group)
    pytest.fail(f"no chapter has a listing matching {pattern.pattern!r}")


@pytest.mark.slow  # a whole-book build: about a minute on 2 cores (scripts/test.sh's slow step)
@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_a_renamed_function_breaks_the_build(tmp_path: Path) -> None:
    chapters = copy_book(tmp_path)
    name = _break_first(_PYOBJECT, chapters)
    result = sphinx_build(chapters, tmp_path / "out")
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"build passed with :pyobject: {name} renamed away"
    assert f"{name}_renamed_away" in output


@pytest.mark.slow  # a whole-book build: about a minute on 2 cores (scripts/test.sh's slow step)
@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_a_renamed_marker_breaks_the_build(tmp_path: Path) -> None:
    chapters = copy_book(tmp_path)
    marker = _break_first(_START_MARKER, chapters)
    result = sphinx_build(chapters, tmp_path / "out")
    assert result.returncode != 0, f"build passed with the marker {marker!r} renamed away"
    assert "pattern not found" in result.stdout + result.stderr


@pytest.mark.slow  # a whole-book build: about a minute on 2 cores (scripts/test.sh's slow step)
@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_without_results_the_book_says_how_to_make_them(tmp_path: Path) -> None:
    # A fresh clone has no benchmarks/results/latest.json: the build passes
    # and the tables are replaced by a note naming the command.
    missing = tmp_path / "no-such-results.json"
    result = sphinx_build(CHAPTERS, tmp_path / "out", "-D", f"book_bench_results={missing}",
                          "-D", f"book_fairness_results={missing}")
    assert result.returncode == 0, result.stdout + result.stderr
    page = page_text((tmp_path / "out" / "html" / "benchmarks.html").read_text(encoding="utf-8"))
    assert "No benchmark results yet" in page
    assert "bash scripts/benchmark.sh" in page
    page = page_text((tmp_path / "out" / "html" / "baselines.html").read_text(encoding="utf-8"))
    assert "No fairness results yet: run python -m benchmarks.fairness --reference" in page


def results_fixture() -> dict:
    """A small results JSON in the schema benchmarks/report.py documents (schema 1)."""
    def summary(rps: float | None, cpu: float | None, status: str = "ok", ratio: float = 1.0) -> dict:
        figures = rps is not None
        return {"status": status, "note": None if status == "ok" else "1 of 1 runs: timeout",
                "runs": 1, "ok_runs": int(figures), "rps": rps, "p50_ms": 1.0 if figures else None,
                "p99_ms": 2.0 if figures else None, "cpu_us_per_req": cpu, "completed": 100,
                "newcomer_ms": None, "failed": 0,
                "ratio": {"rps": ratio, "p50_ms": 1.0, "p99_ms": 1.0, "cpu_us_per_req": 1 / ratio}
                if figures else {}}
    return {
        "schema": 1, "date": "2026-01-31T12:00:00+00:00", "baseline": "asyncio-protocol",
        "machine": {"cpu_model": "Fixture CPU", "cpus": 2, "system": "Linux", "kernel": "6.1",
                    "python": "CPython 3.11.7"},
        "pinning": {"enabled": True, "server_cpus": "0", "load_cpus": "1"},
        "settings": {"repeat": 3, "quick": False},
        "loads": [{"name": "ab-close", "title": "ab -c 10, a new connection per request",
                   "command": "ab -n 5000 -c 10 http://127.0.0.1:PORT/"}],
        "servers": [{"name": "blocking", "kind": "stage"}, {"name": "epoll", "kind": "stage"},
                    {"name": "asyncio-protocol", "kind": "peer"}],
        "runs": [],
        "results": {"ab-close": {"blocking": summary(None, None, "timeout"),
                                 "epoll": summary(4321.0, 25.0, ratio=2.0),
                                 "asyncio-protocol": summary(2160.5, 50.0)}},
    }


def page_text(html: str) -> str:
    """The text of an HTML page or fragment: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split()).replace(" ,", ",")


FAIRNESS_FIXTURE = {
    "schema": 1, "date": "2026-01-31T12:00:00+00:00", "machine": "x86_64, 2 CPUs, Python 3.11.7, Linux 6.1",
    "load_average": 0.5, "settings": {"requests": 400, "clients": 4, "compute_ms": 50, "seed": 1},
    "rows": [{"server": "threaded", "stage": "threaded", "env": {}, "background": "none", "requests": 400,
              "p50_ms": 0.31, "p99_ms": 0.92, "max_ms": 1.5, "computes": 0},
             {"server": "threaded", "stage": "threaded", "env": {}, "background": "/compute?ms=50",
              "requests": 400, "p50_ms": 0.45, "p99_ms": 6.78, "max_ms": 9.9, "computes": 37}],
}


def build_mini_book(tmp_path: Path, page: str) -> subprocess.CompletedProcess[str]:
    """Build a one-page book (``page`` is its MyST text) against the results fixtures."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "index.md").write_text(page, encoding="utf-8")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_fixture()), encoding="utf-8")
    fairness = tmp_path / "fairness.json"
    fairness.write_text(json.dumps(FAIRNESS_FIXTURE), encoding="utf-8")
    return sphinx_build(source, tmp_path / "out", "-D", f"book_bench_results={results}",
                        "-D", f"book_fairness_results={fairness}")


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_bench_directives_render_the_results(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    page = ("# Results\n\n```{bench-table}\n:load: ab-close\n:servers: epoll, blocking\n:notes: cpu\n```\n\n"
            "```{bench-plot}\n:load: ab-close\n```\n\n```{bench-fairness}\n```\n")
    result = build_mini_book(tmp_path, page)
    assert result.returncode == 0, result.stdout + result.stderr
    html = (tmp_path / "out" / "html" / "index.html").read_text(encoding="utf-8")
    text = page_text(html)
    assert "4321 (2.00×)" in text                      # a figure, with its ratio
    assert "1 of 1 runs: timeout" in text              # a failed row says why
    assert "asyncio-protocol" not in page_text(html.split("<table")[1].split("</table>")[0])  # :servers:
    assert "Fixture CPU, 2 CPUs" in text               # the machine line
    assert "ab -n 5000 -c 10" in text                  # the load's command
    assert "server process’s own" in text or "server process's own" in text  # :notes: cpu
    assert "6.78" in text and "/compute?ms=50" in text  # the fairness table
    images = list((tmp_path / "out" / "html" / "_images").glob("*.png"))
    assert len(images) == 1 and images[0].stat().st_size > 1000


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_an_unknown_server_breaks_the_build(tmp_path: Path) -> None:
    page = "# Results\n\n```{bench-table}\n:load: ab-close\n:servers: epoll, no-such-server\n```\n"
    result = build_mini_book(tmp_path, page)
    assert result.returncode != 0
    assert "no-such-server" in result.stdout + result.stderr


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_a_known_server_missing_from_a_partial_run_is_a_row_that_says_so(tmp_path: Path) -> None:
    # `benchmarks/run.py --stages epoll` writes results without the other stages;
    # the chapters still build, and their rows say "not run".
    page = "# Results\n\n```{bench-table}\n:load: ab-close\n:servers: poll, epoll\n```\n"
    result = build_mini_book(tmp_path, page)
    assert result.returncode == 0, result.stdout + result.stderr
    text = page_text((tmp_path / "out" / "html" / "index.html").read_text(encoding="utf-8"))
    assert "poll not run — — — —" in text
    assert text.index("poll not run") < text.index("epoll 4321")


# Fenced code blocks: ``` or ~~~ (three or more), with an info string.
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")
_PYTHON_INFO = re.compile(r"^\s*(\{code(-block)?\}\s*)?(python3?|py|pycon|ipython3?)\b", re.IGNORECASE)
MAX_PASTED_LINES = 8


def python_fences(text: str) -> list[tuple[int, int]]:
    """``(first line number, body line count)`` of each fenced Python block in ``text``."""
    found = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        fence = match.group("fence")
        start = index
        index += 1
        body = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1  # past the closing fence
        if _PYTHON_INFO.match(match.group("info")):
            # Directive options (":caption: ...") are not code.
            code = [line for line in body if not re.match(r"^\s*:[\w-]+:", line)]
            found.append((start + 1, len(code)))
    return found


def test_fence_scanner_sees_python_blocks() -> None:
    text = "intro\n```python\n" + "x = 1\n" * 9 + "```\n~~~{code-block} py\n:caption: c\ny\n~~~\n```sh\nls\n```\n"
    assert python_fences(text) == [(2, 9), (13, 1)]


@pytest.mark.parametrize("chapter", chapter_files(), ids=lambda p: p.name)
def test_no_chapter_pastes_a_long_python_listing(chapter: Path) -> None:
    long = [(line, count) for line, count in python_fences(chapter.read_text(encoding="utf-8"))
            if count > MAX_PASTED_LINES]
    assert not long, (f"{chapter.name}: fenced Python blocks longer than {MAX_PASTED_LINES} lines "
                      f"at lines {[line for line, _ in long]}; literalinclude them from the source")


def pycon_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, source)`` of each fenced ``pycon`` block in ``text``."""
    blocks = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        index += 1
        if not match:
            continue
        start = index
        while index < len(lines) and not lines[index].strip().startswith(match.group("fence")):
            index += 1
        if match.group("info").strip() == "pycon":
            blocks.append((start, "\n".join(lines[start:index]) + "\n"))
        index += 1
    return blocks


@pytest.mark.parametrize("chapter", chapter_files(), ids=lambda p: p.name)
def test_interpreter_sessions_in_chapters_are_true(chapter: Path) -> None:
    # Each ```pycon block is a doctest; the blocks of one chapter share names,
    # as a reader's session would.  "..." in an expected value matches anything.
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    namespace: dict[str, object] = {}
    for line, source in pycon_blocks(chapter.read_text(encoding="utf-8")):
        test = parser.get_doctest(source, namespace, f"{chapter.name}:{line}", str(chapter), line)
        runner.run(test, clear_globs=False)
        namespace.update(test.globs)  # DocTest copied the namespace; carry its names forward
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{chapter.name}: {result.failed} interpreter lines differ (see above)"


def test_the_api_reference_lists_the_package_itself() -> None:
    # chapters/api.md asks autosummary for tinyloop, recursively: a new stage
    # package (tinyloop/aio, say) gets its pages with no edit to the book.
    text = (CHAPTERS / "api.md").read_text(encoding="utf-8")
    assert re.search(r"autosummary::\n\s+:toctree: api\n\s+:recursive:\n\n\s+tinyloop\n", text), text


# ---------------------------------------------------------------------------
# The chapters' claims, each checked against its source: the running
# CPython, the committed results the prose argues from.  A claim that stops
# being true fails here, and the prose must change with it.

RESULTS = ROOT / "benchmarks" / "results"


def _pythons() -> list[Path]:
    """Every CPython 3.11+ interpreter this machine has (pyenv's, then the PATH's), one per minor version."""
    found: dict[str, Path] = {}
    for candidate in sorted((Path.home() / ".pyenv" / "versions").glob("3.1[1-9]*/bin/python")):
        found.setdefault(".".join(candidate.parent.parent.name.split(".")[:2]), candidate)
    for minor in ("3.11", "3.12", "3.13"):
        on_path = shutil.which(f"python{minor}")
        if on_path:
            found.setdefault(minor, Path(on_path))
    return [found[minor] for minor in sorted(found)]


def test_abstract_event_loop_has_the_same_public_methods_on_every_supported_python() -> None:
    # asyncio.md: "{book-fact}`loop-methods` public methods ... 3.11, 3.12 and 3.13 have the same set".
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import book_facts
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    here = book_facts.abstract_loop_methods()
    assert "{book-fact}`loop-methods`" in (CHAPTERS / "asyncio.md").read_text(encoding="utf-8")
    code = ("import asyncio; print(' '.join(sorted(n for n, v in vars(asyncio.AbstractEventLoop).items() "
            "if callable(v) and not n.startswith('_'))))")
    pythons = _pythons()
    if len(pythons) < 2:
        pytest.skip("needs two or more of CPython 3.11, 3.12, 3.13 to compare (pyenv or pythonX.Y on PATH)")
    for python in pythons:
        done = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == here, f"{python}: AbstractEventLoop's public methods differ"


class _Recorder:
    """A protocol that records its calls, and whether pause_writing came inside write()."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.in_write = False

    def connection_made(self, transport: object) -> None:
        self.calls.append("connection_made")

    def pause_writing(self) -> None:
        self.calls.append("pause_writing inside write()" if self.in_write else "pause_writing later")

    def resume_writing(self) -> None:
        self.calls.append("resume_writing")

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> None:
        pass

    def connection_lost(self, exc: BaseException | None) -> None:
        self.calls.append("connection_lost")


def _loops() -> list[tuple[str, object]]:
    import asyncio

    import tinyloop.aio
    return [("asyncio", asyncio.new_event_loop), ("tinyloop.aio", tinyloop.aio.new_event_loop)]


@pytest.mark.parametrize("name, factory", _loops(), ids=lambda v: v if isinstance(v, str) else "")
def test_write_calls_pause_writing_before_it_returns(name: str, factory: object) -> None:
    # asyncio.md: "when a write() takes the buffer over the high-water mark,
    # write() calls the protocol's pause_writing() before it returns" (and
    # the write() docstring of tinyloop/aio/selector_events.py).
    import socket
    loop = factory()
    ours, theirs = socket.socketpair()
    try:
        async def main() -> list[str]:
            protocol = _Recorder()
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, ours)
            transport.set_write_buffer_limits(high=1024)
            protocol.in_write = True
            for _ in range(64):  # the peer never reads, so the kernel's buffer fills and ours grows
                transport.write(b"x" * 65536)
                if protocol.calls[-1].startswith("pause_writing"):
                    break
            protocol.in_write = False
            transport.abort()
            return protocol.calls
        calls = loop.run_until_complete(main())
    finally:
        loop.close()
        theirs.close()
    assert "pause_writing inside write()" in calls, f"{name}: {calls}"


@pytest.mark.parametrize("name, factory", _loops(), ids=lambda v: v if isinstance(v, str) else "")
def test_happy_eyeballs_is_opt_in(name: str, factory: object) -> None:
    # asyncio.md: "It is opt-in, in asyncio and here alike ... whose default is None".
    import inspect
    loop = factory()
    try:
        parameter = inspect.signature(loop.create_connection).parameters["happy_eyeballs_delay"]
    finally:
        loop.close()
    assert parameter.default is None, f"{name}: happy_eyeballs_delay defaults to {parameter.default!r}"


@pytest.mark.parametrize("name, factory, reported", [(*loop, loop[0] == "tinyloop.aio") for loop in _loops()],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_only_a_reset_closes_quietly_in_tinyloop_where_cpython_silences_every_oserror(
        name: str, factory: object, reported: bool) -> None:
    # asyncio.md: tinyloop reports any OSError but a reset or a broken pipe;
    # CPython's _fatal_error stays quiet about every OSError.
    import errno
    import socket
    loop = factory()
    ours, theirs = socket.socketpair()
    handled: list[dict] = []
    loop.set_exception_handler(lambda loop, context: handled.append(context))
    try:
        async def main() -> None:
            transport, _ = await loop.connect_accepted_socket(_Recorder, ours)
            transport._fatal_error(OSError(errno.ENOBUFS, "No buffer space available"), "test")
            await asyncio.sleep(0)
        import asyncio
        loop.run_until_complete(main())
        quiet_reset: list[dict] = []
        loop.set_exception_handler(lambda loop, context: quiet_reset.append(context))
        other, peer = socket.socketpair()

        async def reset() -> None:
            transport, _ = await loop.connect_accepted_socket(_Recorder, other)
            transport._fatal_error(ConnectionResetError(errno.ECONNRESET, "reset"), "test")
            await asyncio.sleep(0)
        loop.run_until_complete(reset())
        peer.close()
    finally:
        loop.close()
        theirs.close()
    assert bool(handled) is reported, f"{name}: ENOBUFS reported={bool(handled)}"
    assert not quiet_reset, f"{name}: a reset reached the exception handler"


def test_the_batching_row_is_told_as_the_committed_run_shows_it() -> None:
    # libuv.md: under plain wrk, the `uv` step's CPU per request is below
    # `uv/no-batching`'s "in every one of the interleaved repetitions, but
    # the two min–max ranges overlap"; pipelined, the chapter says whether
    # the ranges overlap ("no longer overlap") as the committed run has it.
    data = json.loads((RESULTS / "uv_changes.json").read_text(encoding="utf-8"))
    runs = {(r["load"], r["rep"], r["step"]): r["cpu_us"] for r in data["runs"] if r["status"] == "ok"}
    reps = sorted({rep for load, rep, step in runs if load == "wrk"})
    assert reps and all(runs[("wrk", rep, "uv")] < runs[("wrk", rep, "uv/no-batching")] for rep in reps)
    rows = {(r["load"], r["step"]): r["cpu_us"] for r in data["rows"]}
    overlap = {load: rows[(load, "uv")]["max"] >= rows[(load, "uv/no-batching")]["min"]
               for load in ("wrk", "wrk-pipeline")}
    text = " ".join((CHAPTERS / "libuv.md").read_text(encoding="utf-8").split())
    assert overlap["wrk"], "wrk: the ranges no longer overlap; say so in libuv.md"
    assert "every one of the interleaved repetitions, but the two min–max ranges overlap" in text
    said_apart = "in this run the two ranges no longer overlap" in text
    assert said_apart is not overlap["wrk-pipeline"], \
        f"wrk-pipeline: the ranges {'overlap' if overlap['wrk-pipeline'] else 'do not overlap'}; libuv.md says otherwise"


def test_the_echo_prose_agrees_with_the_committed_run() -> None:
    # asyncio.md and libuv.md: at 1 KiB the C loops separate from the Python
    # ones, in CPU per message (below asyncio's and aio's) and in messages/s,
    # because every server set the pace (busy close to all of each second);
    # uvloop's median nearer the C floor's than asyncio's, uv's (in this run)
    # not; uv-protocol against uvloop-protocol, and rloop-protocol on the side
    # of both that libuv.md says; uv and uvloop level at every size.
    one_kib = json.loads((RESULTS / "echo.json").read_text(encoding="utf-8"))["results"]["1024"]
    cpu = {name: row["cpu_us_per_msg"] for name, row in one_kib.items()}
    rate = {name: row["msgs_per_s"] for name, row in one_kib.items()}
    for c_loop in ("uv-protocol", "uvloop-protocol"):
        for python_loop in ("aio-protocol", "asyncio-protocol"):
            assert cpu[c_loop] < cpu[python_loop] and rate[c_loop] > rate[python_loop], (c_loop, python_loop)

    def nearer_floor(name: str) -> bool:
        return cpu[name] - cpu["c-epoll"] < cpu["asyncio-protocol"] - cpu[name]

    asyncio_text = " ".join((CHAPTERS / "asyncio.md").read_text(encoding="utf-8").split())
    assert "uvloop's median is nearer the C floor's" in asyncio_text and nearer_floor("uvloop-protocol")
    assert "`uv`'s in this run is not" in asyncio_text and not nearer_floor("uv-protocol")
    text = " ".join((CHAPTERS / "libuv.md").read_text(encoding="utf-8").split())
    assert "`uv-protocol` costs more than `uvloop-protocol` at the median in this run" in text
    assert cpu["uv-protocol"] > cpu["uvloop-protocol"]
    low, high = sorted((cpu["uv-protocol"], cpu["uvloop-protocol"]))
    assert "`rloop-protocol` falls between the two" in text and low < cpu["rloop-protocol"] < high
    # "level with uvloop at 1, 10 and 100 KiB: at each size the two ranges of repetitions overlap"
    assert "level with uvloop at 1, 10 and 100 KiB: at each size the two ranges of repetitions overlap" in text
    results = json.loads((RESULTS / "echo.json").read_text(encoding="utf-8"))["results"]
    for size in ("1024", "10240", "102400"):
        uv, uvloop = (results[size][name]["spread"]["cpu_us_per_msg"] for name in ("uv-protocol", "uvloop-protocol"))
        assert uv[0] <= uvloop[1] and uvloop[0] <= uv[1], f"{size}: the ranges no longer overlap; say so in libuv.md"
    # Streams at 100 KiB: "which overlap".
    assert "In this run that one call fewer does not show in the time" in text
    uv, uvloop = (results["102400"][name]["spread"]["cpu_us_per_msg"] for name in ("uv-streams", "uvloop-streams"))
    assert uv[0] <= uvloop[1] and uvloop[0] <= uv[1], "100 KiB streams: uv and uvloop are apart now"
    assert all(row["server_busy"] > 0.8 for row in one_kib.values()), "a server did not set the pace"


def test_the_aio_changes_listing_shows_the_rows_the_prose_argues_from() -> None:
    # asyncio.md includes aio_changes.txt's first lines and argues from the stars: it says the
    # small rows and every per-operation row are starred, so each of those shown must be (a row
    # clear of the noise needs new prose, and this test with it). The medians the prose quotes
    # are held by tests/test_aio_changes.py::test_the_chapter_reads_the_committed_run_as_it_is.
    text = (CHAPTERS / "asyncio.md").read_text(encoding="utf-8")
    match = re.search(r"aio_changes\.txt\n:language: text\n:lines: 1-(\d+)\n", text)
    assert match, "asyncio.md must include aio_changes.txt by :lines:"
    shown = (RESULTS / "aio_changes.txt").read_text(encoding="utf-8").splitlines()[:int(match.group(1))]
    assert any(line.startswith("* the two min-max ranges overlap") for line in shown), "the stars' key is cut off"
    data = json.loads((RESULTS / "aio_changes.json").read_text(encoding="utf-8"))
    split = next(i for i, line in enumerate(shown) if line.startswith("Per operation"))
    tables = {"per request": ({row["key"] for row in data["rows"]}, shown[:split]),
              "per operation": ({row["key"] for row in data["micro"]}, shown[split:])}
    rows = []
    for name, (keys, lines) in tables.items():
        found = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in keys}
        assert set(found) == keys, f"{name}: {sorted(keys - set(found))} cut off"
        rows += found.items()

    def starred(line: str) -> bool:
        return re.search(r"\d\*\s", line) is not None

    said = " ".join(text.split())
    assert "`selectors`), every row is starred" in said and "they are starred too" in said
    small = {"no-task-accept", "peername", "debug-checks", "init-fields", "no-tuple", "selectors"}
    micro = {row["key"] for row in data["micro"]}
    clear = [key for key, line in rows if not starred(line) and (key in small or key in micro)]
    assert not clear, f"{clear} stand clear of the noise now; asyncio.md says those rows are starred"
