"""benchmarks/grading.py: the generated class it grades, and a --quick run end to end (the slow step)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import grading
from tinyloop.exercises import catalog, markers

ROOT = Path(__file__).resolve().parent.parent


def test_the_generated_class_mixes_correct_wrong_starter_and_hanging_files(tmp_path: Path) -> None:
    every = [grading.kind(index) for index in range(30 * len(grading.EXERCISES))]
    count = {k: every.count(k) for k in grading.KINDS}
    assert count == {"correct": 54, "wrong": 105, "starter": 18, "hanging": 3}, count
    kinds = grading.write_class(tmp_path, 5, grading.EXERCISES)
    assert set(kinds.values()) == set(grading.KINDS)
    texts = set()
    for (student, name), what in kinds.items():
        text = (tmp_path / student / markers.default_file(catalog.get(name))).read_text()
        texts.add(text)
        compile(text, name, "exec")
        body = text.split("\n", 1)[1]  # less the student's comment
        reference = markers.reference(catalog.get(name))
        assert (body == reference) == (what == "correct"), (student, name, what)
        assert (what == "starter") == bool(markers.unwritten_lines(body, name)), (student, name, what)
    assert len(texts) == len(kinds), "no two students hand in the same bytes"


@pytest.mark.slow  # two gradings of a small class, each check a subprocess: about a minute
@pytest.mark.timeout(900)
def test_quick_run_grades_the_class_with_each_jobs_value(tmp_path: Path) -> None:
    out = tmp_path / "grading.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.grading", "--quick", "--students", "2",
                           "--exercises", "task-cancel", "--timeout", "300", "--out", str(out)],
                          capture_output=True, text=True, timeout=850, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["schema"] == 1 and data["settings"]["quick"] is True
    assert data["mix"] == {"correct": 1, "wrong": 1, "starter": 0, "hanging": 0}
    assert [row["jobs"] for row in data["rows"]] == [1, 2]
    for row in data["rows"]:
        assert row["status"] == "ok" and row["checks"] == 2 and row["checks_per_minute"] > 0, row
        assert row["passed"] == 1 and row["unexpected"] == [], row
    assert data["same_csv"] is True
    assert done.stdout.strip().splitlines()[-1].startswith("grading 2 students x 1 exercises: --jobs 1: ")
    assert (tmp_path / "grading.txt").read_text().startswith("grade a generated class: 2 students")
