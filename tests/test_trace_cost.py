"""benchmarks/trace_cost.py runs every variant's workloads correctly (its timings are not tested).

The benchmark itself is run by a maintainer (it times code); here each
workload runs a few operations on each variant, and the baseline variant is
checked to have no hook sites at all.
"""

from __future__ import annotations

import pytest

from benchmarks import trace_cost
from tinyloop import stages
from tinyloop.trace.recorder import Recorder


@pytest.mark.parametrize("workload", list(trace_cost.WORKLOADS))
@pytest.mark.parametrize("variant", trace_cost.VARIANTS)
@pytest.mark.parametrize("loop_name", ["aio", "uv"])
def test_every_variant_runs_its_workload(loop_name: str, variant: str, workload: str) -> None:
    if loop_name == "uv" and stages.get("uv").unavailable():
        pytest.skip(stages.get("uv").unavailable())
    if loop_name == "uv" and variant == "no hooks":
        pytest.skip("uv has no build without hook sites (the benchmark says so)")
    loop = trace_cost.make_loop(loop_name, variant)
    instruments = loop._instrument.instruments if loop._instrument is not None else ()
    try:
        trace_cost.WORKLOADS[workload](loop, 20)
    finally:
        loop.close()
    if variant == "recorder":
        recorder = instruments[0]
        assert isinstance(recorder, Recorder) and recorder.recorded > 20


def test_the_baseline_has_no_hook_sites() -> None:
    loop = trace_cost.NoHookSites()
    recorder = Recorder(loop.time)
    loop.add_instrument(recorder)
    try:
        trace_cost.callbacks(loop, 50)
    finally:
        loop.close()
    names = {event["name"] for event in recorder.events}
    assert names == {"run"}, "only run_forever's hooks are left: the iteration's are gone"
