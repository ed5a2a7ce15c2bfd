"""docs/_ext/book_map.py: the asyncio chapter's map of an iteration, drawn from the classes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "_ext"))
pytest.importorskip("sphinx")
import book_map  # noqa: E402

from tinyloop.aio.base_events import BaseEventLoop  # noqa: E402
from tinyloop.callbacks.loop import Loop  # noqa: E402


def test_each_aio_step_sits_in_the_class_whose_method_runs() -> None:
    where = {step: klass for klass, step, _ in book_map.aio_steps()}
    assert where["run_once"] is Loop and where["1 _compute_timeout"] is Loop
    assert where["4 _run_ready"] is BaseEventLoop and where["run_forever"] is BaseEventLoop
    assert where["2 select"].__name__ == "_EpollSelector"


def test_uvs_run_once_is_the_c_bases_and_part_iis_steps_are_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tinyloop.uv.loop", reason="tinyloop.uv's extension is not built here")
    steps, unused = book_map.uv_steps()
    assert steps[1][0].__name__ == "UVLoop" and steps[1][1] == "run_once"
    assert [step for _, step, _ in unused] == list(book_map.FOUR_STEPS)
    monkeypatch.setattr(book_map, "UV_PHASES", (("idle", "_on_renamed", "_loop.pyx", ""),))
    with pytest.raises(book_map.ExtensionError, match="_on_renamed"):
        book_map.uv_steps()


def test_the_arrows_follow_the_steps() -> None:
    steps = book_map.aio_steps()
    dot = book_map.dot_source(steps)
    assert dot.count("constraint=false") == len(steps) - 1
