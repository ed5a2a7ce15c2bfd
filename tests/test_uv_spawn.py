"""tinyloop.uv's subprocesses: started by uv_spawn (tinyloop/uv/spawn.pyx), not by Popen.

The conformance suite (tests/conformance) and tests/test_aio_unix.py hold the
asyncio contract, on every row; this file holds what is uv's own: no
blocking read in the loop's thread at the start, the Popen keywords it takes
itself, and the ones it hands to Part III.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any

import pytest

uv = pytest.importorskip("tinyloop.uv.loop", reason="tinyloop.uv's extension is not built here")

from tinyloop.aio import unix_events  # noqa: E402
from tinyloop.uv import _loop  # noqa: E402

PIPE = asyncio.subprocess.PIPE
LIMIT = 15.0


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, LIMIT))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


async def echo_upper() -> tuple[bytes, int, type]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; print(sys.stdin.read().upper(), end='')",
        stdin=PIPE, stdout=PIPE)
    out, _ = await proc.communicate(b"spawned")
    return out, proc.returncode, type(proc._transport)


def test_the_start_makes_no_blocking_call_in_the_loops_thread() -> None:
    """Under blockbuster with nothing allowed, uv starts a child; aio's Popen reads its error pipe."""
    import blockbuster

    with blockbuster.blockbuster_ctx():
        assert run(uv.new_event_loop(), echo_upper()) == (b"SPAWNED", 0, _loop.UVSubprocessTransport)
        with pytest.raises(blockbuster.BlockingError, match="os.read"):
            run(unix_events.new_event_loop(), echo_upper())


def test_popen_is_not_called() -> None:
    loop = uv.new_event_loop()
    popen = subprocess.Popen
    subprocess.Popen = None  # type: ignore[assignment,misc]
    try:
        assert run(loop, echo_upper())[:2] == (b"SPAWNED", 0)
    finally:
        subprocess.Popen = popen  # type: ignore[misc]


def test_cwd_env_and_a_new_session(tmp_path: Any) -> None:
    code = "import os; print(os.getcwd(), os.environ['ONLY'], os.getsid(0) == os.getpid(), len(os.environ))"

    async def main() -> list[str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdout=PIPE, cwd=tmp_path, env={"ONLY": "this"},
            start_new_session=True)
        out, _ = await proc.communicate()
        return out.decode().split()

    cwd, only, leader, count = run(uv.new_event_loop(), main())
    assert (cwd, only, leader) == (str(tmp_path), "this", "True")
    assert int(count) <= 2  # ours, and LC_CTYPE where Python's start-up coerces the locale


def test_pass_fds_passes_those_and_no_other() -> None:
    passed_r, passed_w = os.pipe()
    kept_r, kept_w = os.pipe()  # not inheritable (PEP 446): closed at exec
    code = ("import os, sys; os.write(int(sys.argv[1]), b'through');"
            "print(os.get_inheritable(int(sys.argv[1])), end='');"
            "os.fstat(int(sys.argv[2]))")

    async def main() -> tuple[bytes, bytes, int]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, str(passed_w), str(kept_w), stdout=PIPE, stderr=PIPE,
            pass_fds=[passed_w])
        out, err = await proc.communicate()
        return out, err, proc.returncode

    try:
        out, err, code_ = run(uv.new_event_loop(), main())
        assert out == b"True" and code_ == 1 and b"Bad file descriptor" in err
        assert os.read(passed_r, 100) == b"through"
        assert not os.get_inheritable(passed_w), "the parent's descriptor is left as it was"
    finally:
        for fd in (passed_r, passed_w, kept_r, kept_w):
            os.close(fd)


def test_what_uv_spawn_cannot_do_takes_part_iiis_popen() -> None:
    """preexec_fn runs Python in the child: Popen's path, whose result is the same."""
    async def main() -> tuple[type, bytes]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import os; print(os.environ['SET_IN_CHILD'], end='')",
            stdout=PIPE, preexec_fn=lambda: os.environ.__setitem__("SET_IN_CHILD", "yes"))
        out, _ = await proc.communicate()
        return type(proc._transport), out

    kind, out = run(uv.new_event_loop(), main())
    assert kind is unix_events._UnixSubprocessTransport and out == b"yes"


@pytest.mark.parametrize("args, error", [
    (["/nonexistent/program"], FileNotFoundError),
    ([sys.executable, "-c", "pass\0"], ValueError),
])
def test_a_failed_start_raises_as_popen_and_leaks_nothing(args: list[str], error: type) -> None:
    before = set(os.listdir("/proc/self/fd"))
    loop = uv.new_event_loop()

    async def main() -> None:
        await asyncio.create_subprocess_exec(*args, stdin=PIPE, stdout=PIPE, stderr=PIPE)

    with pytest.raises(error) as raised:
        run(loop, main())
    if error is FileNotFoundError:
        assert raised.value.filename == args[0] and "No such file" in str(raised.value)
    assert set(os.listdir("/proc/self/fd")) - before == set()
    assert loop._debug_counts()["live_handles"] == 0
