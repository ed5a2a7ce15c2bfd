# tests/test_cli.py
#
# The command line, `python -m tinyloop ...`, as a reader types it: `list`
# prints the stage table, `serve` refuses an unknown stage by name, and
# serving a stage that exists announces its address, answers HTTP and
# stops cleanly on SIGTERM, and a stage that cannot run here (Part IV
# without libuv) is refused with the message that says what to install.
# The serve tests run the `blocking` stage, the first one a reader meets.

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tinyloop import cli, stages
from tinyloop.http import HELLO
from tinyloop.testing import ServerProcess, http_get

TIMEOUT = 15  # seconds, for each subprocess


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tinyloop", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def test_list_prints_every_stage_in_order_with_its_chapter_and_summary() -> None:
    result = run("list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(stages.STAGES)
    for line, stage in zip(lines, stages.STAGES):
        name, chapter, summary = (re.escape(text) for text in (stage.name, stage.chapter, stage.summary))
        assert re.fullmatch(rf"{name} +{chapter} +{summary}", line), line
    # The columns line up: every chapter starts at the same column.
    assert len({line.index(stage.chapter, len(stage.name)) for line, stage in zip(lines, stages.STAGES)}) == 1


def test_list_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out == run("list").stdout


def test_an_unknown_stage_is_refused_with_the_known_names() -> None:
    result = run("serve", "no-such-stage", "--port", "0")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "unknown stage 'no-such-stage'" in result.stderr
    for stage in stages.STAGES:
        assert stage.name in result.stderr


def test_a_stage_that_cannot_run_here_is_refused_with_its_message(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Part IV without its extension: the ImportError says what to install,
    # and the command says it on one line, with no traceback
    # (tests/test_uv_unbuilt.py does the same without the extension, for real).
    def load(name: str) -> None:
        raise ImportError("tinyloop.uv is not built here: apt-get install libuv1-dev")

    monkeypatch.setattr(stages, "load", load)
    assert cli.main(["serve", "uv", "--port", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("tinyloop: stage 'uv' cannot run here: "
                            "tinyloop.uv is not built here: apt-get install libuv1-dev\n")


def test_no_command_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_help_names_the_commands() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ["list", "serve", "exercises", "start", "check"]:
        assert command in result.stdout


def test_serve_announces_answers_and_stops_on_sigterm() -> None:
    server = ServerProcess("blocking", timeout=TIMEOUT).start()
    try:
        assert server.stdout_lines[0] == f"tinyloop: serving blocking on http://127.0.0.1:{server.port}/\n"
        assert http_get(server.address, "/") == (200, HELLO)
    finally:
        code = server.stop()
    assert code == 0
    # (Standard error is collected by a thread: allow it a moment.)
    assert eventually(lambda: "tinyloop: blocking: stopped\n" in server.stderr_lines)
    # The port is free again at once (the server closed its listening socket).
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(server.address)


def eventually(predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
    """Whether ``predicate()`` becomes true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_serve_on_a_port_in_use_says_so() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run("serve", "blocking", "--port", str(taken.getsockname()[1]))
    assert result.returncode == 1
    assert result.stdout == ""
    assert re.match(r"tinyloop: cannot listen on 127\.0\.0\.1:\d+: Address already in use", result.stderr)
