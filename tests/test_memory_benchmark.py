# tests/test_memory_benchmark.py
#
# benchmarks/memory.py's --quick run on one stage: it writes its JSON and
# Markdown table where --out says (never the committed folder unless
# --reference), every figure the table shows is in the JSON, and it ends on
# its one-line conclusion.

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(150)
def test_quick_run_writes_json_and_table_and_concludes(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--quick",
                           "--servers", "aio", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    row = data["results"]["aio"]
    assert row["error"] is None and row["bytes_per_connection"] is not None
    assert set(row["rss"]) == {str(n) for n in data["counts"]} and len(data["counts"]) >= 2
    table = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "aio" in table
    assert done.stdout.strip().splitlines()[-1].startswith("KiB per idle keep-alive connection: aio ")


def test_a_quick_run_cannot_be_the_reference() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--quick", "--reference"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "--reference" in done.stderr
