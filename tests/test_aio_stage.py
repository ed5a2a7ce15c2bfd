"""The aio stages stop cleanly on SIGTERM, however the signal falls among their callbacks.

``python -m tinyloop serve aio`` turns SIGTERM into a cancellation of its
main task, delivered by the loop between two callbacks
(tinyloop.aio.server.run_stage).  A KeyboardInterrupt raised inside a
callback instead can lose that callback half-run, and a server whose client
then never detaches waits in wait_closed() forever.  These tests send
SIGTERM while clients are mid-request and leaving, many times, and require a
clean exit within seconds every time.  Loopback only; bounded in count and
time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest

from tinyloop.testing import ServerProcess

ROUNDS = 6


@pytest.mark.parametrize("stage", ["aio", "aio-streams"])
def test_sigterm_among_leaving_clients_stops_the_server_cleanly(stage: str) -> None:
    for _ in range(ROUNDS):
        server = ServerProcess(stage).start()
        clients = [socket.create_connection(server.address, timeout=5) for _ in range(20)]
        try:
            for client in clients:
                client.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            for client in clients[:10]:
                client.close()
            os.kill(server.pid, signal.SIGTERM)
        finally:
            for client in clients[10:]:
                client.close()
        try:
            returncode = server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
            pytest.fail(f"{stage} did not stop within 10 s of SIGTERM")
        assert returncode == 0, "".join(server.stderr_lines)
        assert any("stopped" in line for line in server.stderr_lines), server.stderr_lines
