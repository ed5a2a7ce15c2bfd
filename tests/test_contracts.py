"""The contracts between the layers: each named, each checked before production.

Part II's loop offers :class:`tinyloop.callbacks.loop.Reactor` to what is
built on it, Part III's offers :class:`tinyloop.aio.unix_events.AioBase` to
Part IV's C base, and every loop offers
:class:`tinyloop.trace.instrument.Observable` to its hook sites.  The type
checker holds the Python classes to them (tests/typing_contracts.py); the
tests below hold the C base, which it cannot read, to the same names.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tinyloop.aio.unix_events import AioBase
from tinyloop.callbacks.loop import Reactor

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "tests" / "typing_contracts.py"


def mypy(check: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """mypy on ``check`` alone; the modules it imports are read, and their own errors not counted."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra (pyproject.toml)")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
         "--no-incremental", "--cache-dir", "/dev/null", str(check)],
        cwd=cwd, capture_output=True, text=True, timeout=300)


def members(protocol: type) -> set[str]:
    """The names a Protocol class and the protocols it extends declare (fields and methods)."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if getattr(klass, "_is_protocol", False) and klass is not typing.Protocol:
            names |= set(klass.__dict__.get("__annotations__", {}))
            names |= {name for name, value in vars(klass).items() if callable(value)
                      and not (name.startswith("__") and name.endswith("__"))}
    return names


def test_the_python_loops_keep_their_contracts() -> None:
    result = mypy(CHECK, ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_renamed_slot_fails_the_check(tmp_path: Path) -> None:
    """Rename Part II's ``_instrument`` in a copy of the package: the check fails, naming it."""
    shutil.copytree(ROOT / "tinyloop", tmp_path / "tinyloop",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    loop_py = tmp_path / "tinyloop" / "callbacks" / "loop.py"
    source = loop_py.read_text()
    assert "self._instrument: instruments.InstrumentSet | None = None" in source
    loop_py.write_text(source.replace("self._instrument", "self._instruments"))
    shutil.copy(CHECK, tmp_path / CHECK.name)
    result = mypy(tmp_path / CHECK.name, tmp_path)
    assert result.returncode == 1, result.stdout
    assert 'missing following "Reactor" protocol member' in result.stdout and "_instrument" in result.stdout


def test_the_c_base_keeps_the_contracts_it_fills() -> None:
    """Each ``cdef public`` field of UVLoop is a name of Part II's or Part III's contract."""
    pxd = (ROOT / "tinyloop" / "uv" / "_loop.pxd").read_text()
    body = pxd[pxd.index("cdef class UVLoop:"):]
    public = set(re.findall(r"^\s+cdef public \w+ (\w+)", body, re.M))
    assert {"_ready", "_stopping", "_closed", "_debug", "_instrument", "_task_factory"} <= public
    assert public <= members(AioBase), public - members(AioBase)


def test_the_ring_loops_c_base_keeps_the_contracts_it_fills() -> None:
    """Each ``cdef public`` field of tinyloop.ring's LoopCore is a name of Part II's or Part III's
    contract, or the one its own loop adds (``_proactor``: tinyloop/ring/loop.py); and the loop
    methods its iteration calls, other than its own, are the Reactor's."""
    source = (ROOT / "tinyloop" / "ring" / "fast.pyx").read_text()
    body = source[source.index("cdef class LoopCore:"):]
    public = {name.strip() for names in re.findall(r"^\s+cdef public \w+ ([\w, ]+)$", body, re.M)
              for name in names.split(",")}
    assert {"_ready", "_scheduled", "_stopping", "_debug", "_instrument", "_clock"} <= public
    assert public - {"_proactor"} <= members(AioBase), public - members(AioBase)
    own = set(re.findall(r"^    (?:c?def|cdef inline) (?:\w+ )?(_\w+)\(self", body, re.M))
    assert {"_in_c", "_iteration_c"} <= own
    called = set(re.findall(r"self\.(_\w+)\(", body)) - own
    assert called and called <= members(Reactor), called - members(Reactor)


def test_the_c_base_names_what_it_reads() -> None:
    """No attribute of the layers below is read by a string (getattr/setattr with a literal name)."""
    for path in sorted((ROOT / "tinyloop" / "uv").glob("*.pyx")):
        found = re.findall(r"\b(?:get|set|has)attr\((?:self|loop), [^)]*\)", path.read_text())
        assert found == [], f"{path.name}: {found}"


def test_the_uv_loop_offers_what_part_iii_offers() -> None:
    uv = pytest.importorskip("tinyloop.uv.loop", reason="tinyloop.uv's extension is not built here")
    loop = uv.new_event_loop()
    try:
        missing = {name for name in members(AioBase) if not hasattr(loop, name)}
        assert missing == set() and isinstance(loop, AioBase)
    finally:
        loop.close()


def test_the_contracts_name_the_iterations_four_steps() -> None:
    assert {"_compute_timeout", "_process_events", "_move_due_timers", "_run_ready"} <= members(Reactor)
    assert members(Reactor) < members(AioBase)
