"""benchmarks/instructions.py: its worker runs each operation on each loop, and its table renders its JSON.

The counting itself (valgrind) is the benchmark's, not a test's: it takes
minutes.  What can break quietly is checked here: an operation that no
longer runs on a loop, a row the table drops.
"""

from __future__ import annotations

import pytest

from benchmarks import instructions
from tinyloop import stages


@pytest.mark.parametrize("op", list(instructions.OPERATIONS))
@pytest.mark.parametrize("loop", ["asyncio", "aio", "uv", instructions.PER_TIMER])
def test_the_worker_runs_every_operation(loop, op):
    if loop.startswith("uv") and stages.get("uv").unavailable():
        pytest.skip(stages.get("uv").unavailable())
    assert instructions.main(["--worker", loop, op, "200"]) == 0


def test_the_table_has_a_row_per_loop_and_says_what_a_count_is():
    data = {"loops": ["uv", "uvloop"], "operations": ["call_soon", "timer_fire"],
            "counts": {"uv": {"call_soon": 3044.2, "timer_fire": 3636.0},
                       "uvloop": {"call_soon": 3307.0, "timer_fire": "not run: no uvloop"}},
            "valgrind": "valgrind-3.19.0", "python": "3.11.7", "date": "2026-11-23"}
    table = instructions.render(data)
    assert "| uv | 3,044 | 3,636 |" in table
    assert "| uvloop | 3,307 | not run: no uvloop |" in table
    assert "not a time" in table
