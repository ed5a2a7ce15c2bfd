"""The behaviour suite's rows come from the stage registry: every stage with a ``loop`` has an adapter and a row."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from behaviour import LoopBehaviour
from behaviour.adapters import ADAPTERS, AsyncioReference

from tinyloop import stages

TESTS = Path(__file__).resolve().parent


def _rows() -> dict[str, str]:
    """Stage name -> the test class that runs the suite with that stage's adapter.

    The asyncio reference row borrows the aio adapter but runs asyncio's loop:
    it is no stage's row.
    """
    rows = {}
    for path in sorted(TESTS.glob("test_behaviour_*.py")):
        module = importlib.import_module(path.stem)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, LoopBehaviour) and not issubclass(cls, AsyncioReference):
                for adapter in cls.__mro__:
                    if adapter in ADAPTERS.values() and adapter is ADAPTERS.get(adapter.stage):
                        rows.setdefault(adapter.stage, f"{path.name}::{name}")
                        break
    return rows


def test_every_loop_stage_has_an_adapter_and_a_row():
    """Every stage whose loop takes the fakes has an adapter and a row; the others have none.

    A loop with ``fakes=False`` keeps its own clock and poller (Part IV's,
    on libuv): it cannot be handed a fake selector or clock, so the
    behaviour suite cannot drive it.  Its row is in the conformance suite
    instead (tests/conformance/), and its own tests in tests/test_uv_loop.py.
    """
    loop_stages = [stage.name for stage in stages.STAGES if stage.loop is not None and stage.fakes]
    own_clock = [stage.name for stage in stages.STAGES if stage.loop is not None and not stage.fakes]
    assert {"callbacks", "coroutines", "aio"} <= set(loop_stages)
    assert "uv" in own_clock
    assert sorted(ADAPTERS) == sorted(loop_stages)
    rows = _rows()
    assert sorted(rows) == sorted(loop_stages), rows


def test_a_loop_without_fakes_is_a_conformance_row():
    from tinyloop.testing import asyncio_loop_stages

    for stage in stages.STAGES:
        if stage.loop is not None and not stage.fakes:
            assert stage.name in asyncio_loop_stages(), (
                f"{stage.name} takes no fakes, so only the conformance suite tests its loop")
