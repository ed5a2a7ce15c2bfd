"""benchmarks.sitting: every Part's reference run, in an order that keeps timings undisturbed.

Nothing here runs an experiment: the steps are checked as data (each names a module that exists,
runs it with ``--reference``, and the counting steps come after every timing), the command line
is checked for its refusals, and benchmarks/README.md must show each step's command, so the table
a reader trusts and the sitting that made the files cannot drift apart.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks import sitting

ROOT = Path(__file__).resolve().parent.parent


def test_each_step_names_an_experiment_that_exists_and_writes_the_reference() -> None:
    names = [step.name for step in sitting.STEPS]
    assert len(names) == len(set(names))
    for step in sitting.STEPS:
        assert step.argv[0] == "-m", step
        assert importlib.util.find_spec(step.argv[1]) is not None, step.argv[1]
        # each writes the book's committed copy: with --reference, or a rendering into results/
        assert "--reference" in step.argv or any(arg.startswith("benchmarks/results/") for arg in step.argv), step
        assert "--quick" not in step.argv and "--out" not in step.argv, step.name


def test_the_counting_steps_come_after_every_timing() -> None:
    kinds = [step.counts for step in sitting.STEPS]
    first_count = kinds.index(True)
    assert all(kinds[first_count:]), "a timing step runs after a counting one"
    assert not any(kinds[:first_count])


def test_the_limits_step_measures_the_servers_before_the_remedy_too() -> None:
    (limits,) = [step for step in sitting.STEPS if step.name == "limits"]
    assert sitting.BEFORE in limits.argv
    assert sitting.LIMITS_BEFORE


def test_the_readme_shows_every_step_command() -> None:
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for step in sitting.STEPS:
        assert sitting.shown(step) in readme, f"benchmarks/README.md lacks {sitting.shown(step)!r}"


def test_the_table_has_a_row_per_step_with_its_files_and_load() -> None:
    log = {"steps": [{"name": "run", "start": "2026-11-29T00:11:04+00:00", "end": "2026-11-29T00:19:00+00:00",
                      "seconds": 476.2, "load_start": 0.9, "load_end": 1.1},
                     {"name": "instructions", "start": "2026-11-29T02:00:00+00:00",
                      "end": "2026-11-29T02:25:00+00:00", "seconds": 1500.0, "load_start": 1.0,
                      "load_end": 2.5}]}
    lines = sitting.table(log).splitlines()
    assert len(lines) == 4
    assert "| run | `latest.json`, `latest.png` | 2026-11-29 00:11 | 476 | `python -m benchmarks.run --reference` | 0.9 → 1.1 |" in lines[2]
    assert lines[3].endswith("1.0 → 2.5 (counts, not times) |")


def test_list_prints_the_steps_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert sitting.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [step.name for step in sitting.STEPS]


@pytest.mark.parametrize("argv, message", [
    ([], "pass --reference"),
    (["--reference", "--from", "nosuch"], "no such step"),
    (["--reference", "--only", "run,nosuch"], "no step nosuch"),
])
def test_the_command_refuses_what_it_cannot_do(argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sitting.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_committed_log_covers_every_step_and_each_exited_0() -> None:
    log = json.loads((ROOT / "benchmarks" / "results" / "sitting.json").read_text())
    records = {record["name"]: record for record in log["steps"]}
    assert set(records) == {step.name for step in sitting.STEPS}
    for name, record in records.items():
        assert record["returncode"] == 0, name
        assert record["start"] <= record["end"], name


def test_the_readme_table_is_the_committed_log() -> None:
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    shown = readme.split("<!-- sitting: begin -->\n", 1)[1].split("<!-- sitting: end -->", 1)[0]
    log = json.loads((ROOT / "benchmarks" / "results" / "sitting.json").read_text())
    assert shown.strip() == sitting.table(log), "run python -m benchmarks.sitting --table into the README"
