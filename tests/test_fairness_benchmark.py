# tests/test_fairness_benchmark.py
#
# benchmarks/fairness.py on two servers with a few requests: it writes the
# JSON and table it is told to, every row the table shows is in the JSON,
# and it ends on its one-line conclusion.

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a whole small run of the benchmark: the slow step (CI) runs it
@pytest.mark.timeout(150)
def test_a_small_run_writes_its_json_and_table_and_concludes(tmp_path: Path) -> None:
    out, table = tmp_path / "fairness.json", tmp_path / "fairness.txt"
    done = subprocess.run([sys.executable, "-m", "benchmarks.fairness", "--servers",
                           "threaded,coroutines", "--requests", "20", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {(row["server"], row["background"]) for row in data["rows"]} == {
        (server, background) for server in ("threaded", "coroutines") for background in ("none", "/compute?ms=50")}
    assert all(row["p99_ms"] is not None for row in data["rows"])
    assert "coroutines" in table.read_text(encoding="utf-8")
    assert done.stdout.strip().splitlines()[-1].startswith("p99 of fast requests beside a slow handler: threaded ")
