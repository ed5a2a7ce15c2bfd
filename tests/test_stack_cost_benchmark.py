# tests/test_stack_cost_benchmark.py
#
# benchmarks/stack_cost.py --quick (pyperf, a few loops): every measure at every depth is
# in the JSON with its three timings, and the run ends on its conclusion.

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a whole small run of the benchmark: the slow step (CI) runs it
@pytest.mark.timeout(150)
def test_a_tiny_run_writes_every_row_and_concludes(tmp_path: Path) -> None:
    out = tmp_path / "stack_cost.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.stack_cost", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    depths = data["settings"]["depths"]
    assert {row["depth"] for row in data["rows"]} == set(depths)
    assert all(row["stack_ns"] > 0 and row["yieldfrom_ns"] > 0 for row in data["rows"])
    assert all(low <= row["stack_ns"] <= high for row in data["rows"] for low, high in [row["stack_ns_range"]])
    assert {"cpu_model", "python"} <= set(data["machine"]) and data["load_average"]
    assert "yield from" in out.with_suffix(".txt").read_text(encoding="utf-8")  # the table, beside
    assert done.stdout.strip().splitlines()[-1].startswith(
        f"a hand-kept generator stack against yield from, at depth {max(depths)}: ")
