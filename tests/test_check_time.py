# tests/test_check_time.py
#
# scripts/check_time.py's plumbing, with the checker's runs faked (a real
# run takes minutes, under the bench lock): which files are checked how
# often, the compile run of a Cython exercise kept apart, --update, and the
# line that says whether the targets were met.

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scripts import check_time


def test_check_time_times_both_files_keeps_the_compile_apart_and_updates(tmp_path, monkeypatch, capsys):
    seen: list[tuple[str, str]] = []

    def fake_check(name: str, path: Path) -> tuple[float, bool, list[str]]:
        seen.append((name, path.parent.name))
        wrong = path.parent.name == "wrong"
        return (1.0 if wrong else 4.0) + len(seen) / 100, not wrong, ["FAIL test_x"] if wrong else []

    monkeypatch.setattr(check_time, "timed_check", fake_check)
    out = tmp_path / "check_time.json"
    assert check_time.main(["--exercises", "uv-timer-heap,timer-heap", "--runs", "2", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert list(data["exercises"]) == ["timer-heap", "uv-timer-heap"], "the book's order"
    python, cython = data["exercises"]["timer-heap"], data["exercises"]["uv-timer-heap"]
    assert seen.count(("timer-heap", "reference")) == 2 and seen.count(("uv-timer-heap", "reference")) == 3
    assert python["reference"]["first_with_build"] is None and len(python["reference"]["seconds"]) == 2
    assert cython["reference"]["first_with_build"] is not None and len(cython["reference"]["seconds"]) == 2
    assert python["wrong"]["verdicts"] == ["FAILED", "FAILED"] and python["wrong"]["file"].startswith("line ")
    assert python["reference"]["median"] == pytest.approx(sum(python["reference"]["seconds"]) / 2)
    printed = capsys.readouterr().out
    assert re.search(r"^reference python: medians 4\.\d-4\.\d s over 1 exercises; target 10 s: met$", printed, re.M)

    assert check_time.main(["--exercises", "timer-heap", "--runs", "1", "--update", "--out", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["exercises"]["uv-timer-heap"] == cython, "--update keeps the exercises not re-measured"
    assert len(data["commands"]) == 2 and data["command"].startswith("python -m scripts.check_time ")
