# docs/_ext/book_catalog.py
#
# Directives that render the code's own tables, so the book cannot fall out
# of step with them:
#
#   {stages}              the stage table from tinyloop.stages.STAGES: name,
#                         chapter, summary, and the command that serves it.
#                         Option ``:chapter: NAME`` keeps one chapter's rows.
#   {exercises} CHAPTER   the chapter's exercises from the exercise catalog,
#                         each with its instructions and the commands that
#                         write a starter file and grade a solution.
#   {exercise-checks}     per exercise, the tests its check runs (pytest's
#                         arguments) and the server properties it measures:
#                         the checker's internals, for the teachers' page.
#   {mutation-table}      the checker's mutation score per exercise, from
#                         benchmarks/results/mutation.json (teachers' page).
#
# A chapter that asks for exercises and finds none is a warning (so an error
# under -W): the reader was promised them.  Each document that uses one of
# these directives depends on the source files it read, so editing a
# catalog or the stage table rebuilds the page.

from __future__ import annotations

import importlib
import importlib.util
import inspect

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from book_tables import table
from tinyloop.exercises.model import Exercise

__all__ = ["ExercisesDirective", "MutationTableDirective", "StagesDirective", "load_exercises", "setup"]

logger = logging.getLogger(__name__)

# The loop properties (tinyloop/exercises/model.py) as a reader says them.
PROPERTY_WORDS = {
    "single_thread": "it serves many clients from one thread",
    "idle_cpu": "it uses no CPU while idle",
    "no_fd_growth": "it leaks no file descriptors",
    "slow_client": "a slow client holds up no other",
}


def _module_exists(name: str) -> bool:
    """Whether module ``name`` can be imported (its parent packages included)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _depend_on(directive: SphinxDirective, module: object) -> None:
    """Rebuild the current document when ``module``'s source file changes."""
    try:
        path = inspect.getsourcefile(module)  # type: ignore[arg-type]
    except TypeError:
        return
    if path:
        directive.env.note_dependency(path)


def _doc_link(directive: SphinxDirective, docname: str) -> nodes.Node:
    """A link to chapter ``docname`` if it exists yet, else its name as text."""
    if docname not in directive.env.found_docs:
        return nodes.Text(docname)
    ref = addnodes.pending_xref("", refdomain="std", reftype="doc", reftarget="/" + docname,
                                refexplicit=False, refwarn=True)
    ref += nodes.inline(docname, docname)
    return ref


class StagesDirective(SphinxDirective):
    """``{stages}``: the table of the book's stages, from ``tinyloop.stages.STAGES``."""

    has_content = False
    option_spec = {"chapter": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        stages = importlib.import_module("tinyloop.stages")
        _depend_on(self, stages)
        chapter = self.options.get("chapter")
        rows = []
        for stage in stages.STAGES:
            if chapter and stage.chapter != chapter:
                continue
            written = _module_exists(stage.module)
            command = f"`python -m tinyloop serve {stage.name}`" if written else "(being written)"
            rows.append([f"`{stage.name}`", _doc_link(self, stage.chapter), stage.summary, command])
        if not rows:
            logger.warning("{stages}: no stage belongs to chapter %r", chapter,
                           location=self.get_location())
            return []
        return [table(["Stage", "Chapter", "What it shows", "Serve it"], rows,
                      classes=["book-stages"])]


def load_exercises(chapter: str) -> list[Exercise]:
    """The exercises of ``chapter``, in catalog order.

    Asks ``tinyloop.exercises.catalog.by_chapter(chapter)``; while that module
    does not exist, reads ``tinyloop.exercises.catalog_<chapter>.EXERCISES``.
    Returns ``[]`` when neither exists.  Raises what a broken catalog raises.
    """
    if _module_exists("tinyloop.exercises.catalog"):
        catalog = importlib.import_module("tinyloop.exercises.catalog")
        return list(catalog.by_chapter(chapter))
    name = f"tinyloop.exercises.catalog_{chapter}"
    if not _module_exists(name):
        return []
    return [e for e in importlib.import_module(name).EXERCISES if e.chapter == chapter]


class ExercisesDirective(SphinxDirective):
    """``{exercises} CHAPTER``: the chapter's exercises, from the exercise catalog."""

    has_content = False
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        chapter = self.arguments[0]
        try:
            exercises = load_exercises(chapter)
        except Exception as error:  # a broken catalog must stop the build, visibly
            logger.warning("{exercises}: cannot load the catalog for %r: %s: %s", chapter,
                           type(error).__name__, error, location=self.get_location())
            return []
        for name in ("tinyloop.exercises.catalog", f"tinyloop.exercises.catalog_{chapter}"):
            if _module_exists(name):
                _depend_on(self, importlib.import_module(name))
        if not exercises:
            logger.warning("{exercises}: the catalog has no exercises for chapter %r", chapter,
                           location=self.get_location())
            return []
        return [self._render(exercise) for exercise in exercises]

    def _render(self, exercise: Exercise) -> nodes.Node:
        name = exercise.name
        box = nodes.admonition(classes=["book-exercise"], ids=[f"exercise-{name}"])
        title = f"Exercise {name}: {exercise.title}"
        box += nodes.title(title, title)
        # The catalog indents its instructions (triple-quoted strings): dedent
        # them, or Markdown would take them for a code block.
        box.extend(self.parse_text_to_nodes(inspect.cleandoc(exercise.instructions)))
        markers = importlib.import_module("tinyloop.exercises.markers")
        source = markers.source_path(exercise.module)
        module_path = str(source.relative_to(source.parents[len(exercise.module.split(".")) - 1]))
        # In the reader's words: what is checked, not how (the tests the
        # checker runs are listed on the teachers' page, {exercise-checks}).
        where = nodes.paragraph()
        where += nodes.Text("You write the missing part of ")
        where += nodes.literal(module_path, module_path)
        where += nodes.Text(". The check runs this chapter's tests on your file")
        stage = exercise.stage
        properties = exercise.properties
        if stage and properties:
            checked = ", ".join(PROPERTY_WORDS.get(p, p.replace("_", " ")) for p in properties)
            where += nodes.Text(f", then starts the {stage} server with it and checks that {checked}")
        where += nodes.Text(".")
        box += where
        check = markers.check_command(name)
        commands = (f"source .venv/bin/activate      # once per terminal, in the checkout\n"
                    f"python -m tinyloop start {name}      # writes ./{markers.default_file(exercise)}\n{check}")
        box += nodes.literal_block(commands, commands, language="sh")
        return box


class ExerciseChecksDirective(SphinxDirective):
    """``{exercise-checks}``: for every exercise of the catalog, the pytest arguments its check runs
    (``checker.test_arguments``) and the server properties it measures (teachers' page)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        catalog = importlib.import_module("tinyloop.exercises.catalog")
        checker = importlib.import_module("tinyloop.exercises.checker")
        _depend_on(self, catalog)
        rows = []
        for exercise in catalog.exercises():
            arguments = " ".join(checker.test_arguments(exercise))
            measured = (f"{exercise.stage}: {', '.join(exercise.properties)}"
                        if exercise.stage and exercise.properties else "—")
            rows.append([f"`{exercise.name}`", exercise.chapter, nodes.literal(arguments, arguments), measured])
        return [table(["Exercise", "Chapter", "pytest runs", "Server properties"], rows,
                      classes=["book-checks"])]


class MutationTableDirective(SphinxDirective):
    """``{mutation-table}``: how many wrong solutions the checker catches, per exercise,
    from ``benchmarks/results/mutation.json`` (``scripts/mutation.py`` writes it).

    One row per exercise of the catalog: mutants, killed, equivalent,
    surviving, the score, and the score before, when the file keeps an earlier
    run.  Under the table: every equivalent mutant with its reason, and every
    survivor.  Without the file, a note with the command that makes it.
    """

    has_content = False

    def run(self) -> list[nodes.Node]:
        import json
        from pathlib import Path

        path = Path(self.env.app.confdir).parent / "benchmarks" / "results" / "mutation.json"
        self.env.note_dependency(str(path))
        if not path.exists():
            note = nodes.note()
            note += nodes.paragraph(text="Not measured yet: run bash scripts/mutation.sh "
                                         "(it writes benchmarks/results/mutation.json).")
            return [note]
        data = json.loads(path.read_text(encoding="utf-8"))
        measured = data.get("exercises", {})
        before = data.get("before", {}).get("exercises", {})
        catalog = importlib.import_module("tinyloop.exercises.catalog")
        rows, notes = [], []

        def score(value: object) -> str:
            return "—" if value is None else f"{float(value):.0%}"  # type: ignore[arg-type]

        for exercise in catalog.exercises():
            entry = measured.get(exercise.name)
            if entry is None:
                rows.append([f"`{exercise.name}`", exercise.chapter, "not measured", "", "", "", "", ""])
                continue
            rows.append([f"`{exercise.name}`", exercise.chapter, entry["mutants"] - entry.get("incompetent", 0),
                         entry["killed"], len(entry.get("equivalent", [])), entry["survived"],
                         score(entry.get("score")), score((before.get(exercise.name) or {}).get("score"))])
            for item in entry.get("equivalent", []):
                notes.append(f"{exercise.name}, line {item['line']} ({item['operator'].split('/')[-1]}): "
                             f"`{item['code']}`: equivalent, {item['reason']}")
            for item in entry.get("survivors", []):
                change = " / ".join(item.get("diff", [])[:2]) or item["code"]
                notes.append(f"{exercise.name}, line {item['line']} ({item['operator'].split('/')[-1]}): "
                             f"survives: `{change}`")
        out: list[nodes.Node] = [table(
            ["Exercise", "Chapter", "Mutants", "Killed", "Equivalent", "Survived", "Score", "Before"],
            rows, classes=["book-mutation"], numeric_from=2)]
        line = nodes.paragraph(classes=["book-bench-machine"])
        line += nodes.Text(f"Measured {str(data.get('date', ''))[:10]} with cosmic-ray "
                           f"{data.get('tool')} on Python {data.get('python')}; "
                           f"'Before': {str(data.get('before', {}).get('date') or '')[:10]} "
                           f"({data.get('before', {}).get('label') or 'an earlier run'}).")
        out.append(line)
        if notes:
            items = nodes.bullet_list(classes=["book-bench-notes"])
            counted: dict[str, int] = {}
            for text in notes:  # one line per kind of mutant, with how many there were
                counted[text] = counted.get(text, 0) + 1
            for text, count in counted.items():
                text = text.replace(": equivalent,", f": {count} equivalent mutants,", 1) \
                    if count > 1 else text
                item = nodes.list_item()
                item += nodes.paragraph("", "", *_code_cells(text))
                items += item
            # The mutants quote lines of the solutions: collapsed like every
            # solution, and left out of a teacher's build (book_solutions.py).
            from book_solutions import omit_solutions
            if not omit_solutions(self.env.app):
                made = self.parse_text_to_nodes(
                    ":::{dropdown} Equivalent and surviving mutants (they quote the solutions)\n"
                    ":class-container: book-solution\n\nMUTANTS-PLACEHOLDER\n:::\n")
                for para in made[0].findall(nodes.paragraph):
                    if para.astext() == "MUTANTS-PLACEHOLDER":
                        para.replace_self(items)
                        break
                out.extend(made)
        return out


def _code_cells(text: str) -> list[nodes.Node]:
    """``text`` with its backquoted spans as inline code."""
    parts: list[nodes.Node] = []
    for index, piece in enumerate(text.split("`")):
        if index % 2:
            parts.append(nodes.literal(piece, piece))
        elif piece:
            parts.append(nodes.Text(piece))
    return parts


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("book_tables")  # its tables' labelled cells (the phone layout)
    app.add_directive("stages", StagesDirective)
    app.add_directive("exercises", ExercisesDirective)
    app.add_directive("mutation-table", MutationTableDirective)
    app.add_directive("exercise-checks", ExerciseChecksDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
