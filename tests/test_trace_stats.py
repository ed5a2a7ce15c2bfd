"""``python -m tinyloop serve STAGE --stats``: the live panel, read off a tmux screen.

The server runs in a detached tmux session of a fixed size; the test sends
it requests, one of them a 40 ms ``/compute``, and reads the panel with
``tmux capture-pane``, as a reader would see it in a terminal.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tinyloop.commands.stats import LoopStats, render

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10, check=True).stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stage", ["callbacks", "aio", "uv", "ring"])
def test_the_panel_under_tmux(stage: str, tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("no tmux: install it (Debian: apt-get install tmux; scripts/setup.sh does)")
    pytest.importorskip("rich", reason="rich is in the dev extra")
    from tinyloop import stages
    if stages.get(stage).unavailable():
        pytest.skip(stages.get(stage).unavailable())
    port = free_port()
    session = f"tinyloop-stats-{os.getpid()}-{stage}"
    command = (f"cd {ROOT} && PYTHONPATH={ROOT} {sys.executable} -m tinyloop serve {stage} "
               f"--port {port} --stats 2>{tmp_path / 'stderr'}; echo exited $? > {tmp_path / 'status'}")
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "40", command)
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as reply:
                    assert reply.status == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/compute?ms=40", timeout=10) as reply:
            assert reply.status == 200
        for _ in range(10):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                pass
        screen = ""
        slowest: list[float] = []
        while time.monotonic() < deadline:
            time.sleep(0.6)  # at least one redraw after the requests
            screen = tmux("capture-pane", "-p", "-t", session)
            slowest = [float(ms) for ms in re.findall(r"│ \S+ +│ +([\d.]+) │", screen)]
            if any(ms >= 40 for ms in slowest):
                break
        assert f"tinyloop serve {stage} on 127.0.0.1:{port}" in screen, screen
        for label in ("iterations/s", "time in wait", "time in callbacks", "ready queue",
                      "slowest callbacks", "tasks"):
            assert label in screen, f"{label!r} not on the panel:\n{screen}"
        assert any(ms >= 40 for ms in slowest), f"the 40 ms handler is among the slowest callbacks:\n{screen}"
        tmux("send-keys", "-t", session, "C-c")
        while not (tmp_path / "status").exists():
            assert time.monotonic() < deadline + 10, "Ctrl-C did not stop the server"
            time.sleep(0.1)
        assert (tmp_path / "status").read_text().strip() == "exited 0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=10)


def test_render_shows_shares_and_slowest() -> None:
    pytest.importorskip("rich")
    from rich.console import Console
    stats = LoopStats()
    window = stats.take()
    window.iterations, window.wait, window.callbacks, window.callback_count = 50, 0.25, 0.5, 100
    console = Console(width=100, record=True, file=open(os.devnull, "w"))
    console.print(render("t", window, window.start + 1.0, [(0.040, "Client._on_readable")]))
    text = console.export_text()
    assert "iterations/s  50" in text and "25.0%" in text and "50.0%" in text
    assert "Client._on_readable" in text and "40.00" in text


def test_serve_without_stats_loads_neither_rich_nor_the_panel() -> None:
    code = ("import sys; from tinyloop import cli; cli.build_parser().parse_args(['serve', 'callbacks']); "
            "print('rich' in sys.modules, 'tinyloop.commands.stats' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.stdout.split() == ["False", "False"], result.stderr


def test_without_rich_one_line_says_what_to_install(tmp_path: Path) -> None:
    # A module named rich that fails to import, as in an install without the dev extra.
    (tmp_path / "rich.py").write_text("raise ImportError('No module named rich')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    result = subprocess.run([sys.executable, "-m", "tinyloop", "serve", "callbacks", "--port", "0", "--stats"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tinyloop: serve --stats draws its panel with rich, which is not installed: pip install rich"]
