"""The flight recorder on tinyloop.ring: each SQE, each io_uring_enter's batch, each CQE.

A scripted exchange on one connection (the client a plain socket in the
test, the server an echo protocol on the loop) gives a known list of
operations: a receive per message, a send per echo, and the receive after
each echo submitted in the same io_uring_enter as that echo's send.  The
recorder must report exactly those, with the kernel's own counts (the
ring's counters of SQEs taken and CQEs reaped) agreeing with its batches,
on both cores.  Then: a close with a receive outstanding is a cancel and a
-ECANCELED completion; a loop with no instrument runs no hook and wraps
no callback; ``python -m tinyloop trace`` records a script and the stage
on ring, and refuses the raw io_uring servers in one line; the book's two
figures are drawn from committed traces that show what their captions say.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_trace_recorder import validate

from tinyloop.raw.uring import unavailable
from tinyloop.trace.recorder import LOOP_TID, Recorder

REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"ring: {REASON}")

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 10.0
MESSAGES = (b"one", b"two", b"three!")


def cores() -> list[str]:
    """The ring cores built here: the Python one always, the Cython one where it imports."""
    from tinyloop.ring import core
    return ["python"] + (["cython"] if core.built() else [])


def new_loop(core: str) -> Any:
    from tinyloop.ring.loop import Loop
    return Loop(core=core)


class Echo(asyncio.Protocol):
    """Sends back what it receives; ``received`` counts the bytes, ``lost`` is done at connection_lost."""

    def __init__(self) -> None:
        self.lost = asyncio.get_running_loop().create_future()
        self.received = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self.transport.write(data)

    def echoed(self, total: int) -> bool:
        """``total`` bytes received, and the kernel has confirmed sending all of them back."""
        return self.received == total and self.transport.get_write_buffer_size() == 0

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set_result(exc)


async def until(condition: Any) -> None:
    """Let the loop run until ``condition()`` holds (TimeoutError after TIMEOUT s)."""
    async with asyncio.timeout(TIMEOUT):
        while not condition():
            await asyncio.sleep(0.001)


def spans(trace: dict[str, Any], cat: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
    return sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)
                   and (name is None or e["name"] == name)), key=lambda e: e["ts"] + e["dur"])


def track_names(trace: dict[str, Any]) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}


def echo_exchange(core: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The scripted exchange, recorded: ``(trace, the ring's own counts)``.

    The client sends each of MESSAGES and reads its echo before the next;
    then it closes, and the server's receive completes with 0 (end of file).
    The counts are the ring's (SQEs the kernel took, CQEs reaped,
    io_uring_enter calls), read when the loop has stopped.
    """
    loop = new_loop(core)
    recorder = Recorder(loop.time)
    loop.add_instrument(recorder)
    server, client = socket.socketpair()
    client.settimeout(TIMEOUT)
    try:
        async def main() -> None:
            _, protocol = await loop.connect_accepted_socket(Echo, server)
            sent = 0
            for message in MESSAGES:
                client.sendall(message)
                sent += len(message)
                await until(lambda: protocol.echoed(sent))   # the send's CQE has come
                assert client.recv(100) == message
            client.close()
            await protocol.lost

        loop.run_until_complete(main())
        ring = loop._proactor.ring
        counts = {"submitted": ring.submitted, "completed": ring.completed, "enters": ring.enters}
    finally:
        client.close()
        loop.close()
    return recorder.trace(), counts


@pytest.fixture(scope="module", params=cores())
def exchange(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, int]]:
    return echo_exchange(request.param)


def server_operations(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The RECV and SEND spans of the one socket the exchange served, in the order they completed."""
    names = track_names(trace)
    socket_ops = [e for e in spans(trace, "operation") if e["name"] in ("RECV", "SEND")]
    fds = {e["args"]["fd"] for e in socket_ops}
    assert len(fds) == 1, f"one socket's operations: {fds}"
    assert all(names[e["tid"]].startswith(f"{e['name']} fd {e['args']['fd']}") for e in socket_ops)
    return socket_ops


def test_the_trace_is_valid_and_names_the_ring_loop(exchange: Any) -> None:
    trace, _ = exchange
    validate(trace)
    assert track_names(trace)[LOOP_TID] == "loop (tinyloop.ring.loop.Loop)"


def test_each_message_is_one_receive_and_each_echo_one_send(exchange: Any) -> None:
    trace, _ = exchange
    operations = server_operations(trace)
    receives = [e["args"]["res"] for e in operations if e["name"] == "RECV"]
    sends = [e["args"]["res"] for e in operations if e["name"] == "SEND"]
    assert receives == [len(m) for m in MESSAGES] + [0], "a receive per message, then the end of file"
    assert sends == [len(m) for m in MESSAGES], "one send per echo, all its bytes"
    # Every CQE of these operations is marked on the operation's own track, with its result.
    cqes = [e for e in trace["traceEvents"] if e.get("name") == "CQE"]
    for span in operations:
        assert [c["args"]["res"] for c in cqes if c["args"]["user_data"] == span["args"]["user_data"]] \
            == [span["args"]["res"]]


def test_an_echo_and_the_next_receive_go_in_one_io_uring_enter(exchange: Any) -> None:
    trace, _ = exchange
    operations = server_operations(trace)
    enters = {e["args"]["enter"]: e for e in spans(trace, name="io_uring_enter") if "enter" in e["args"]}
    for send in (e for e in operations if e["name"] == "SEND"):
        batch = [e for e in operations if e["args"]["enter"] == send["args"]["enter"]]
        # data_received wrote (a SEND prepared), then the transport asked for more (a RECV).
        assert [(e["name"], e["args"]["order"]) for e in sorted(batch, key=lambda e: e["args"]["order"])] \
            == [("SEND", send["args"]["order"]), ("RECV", send["args"]["order"] + 1)]
        enter = enters[send["args"]["enter"]]
        assert enter["args"]["sqes"]["SEND"] >= 1 and enter["args"]["sqes"]["RECV"] >= 1
        # An operation's span starts at the io_uring_enter that submitted it, after its SQE was prepared.
        for event in batch:
            assert event["ts"] == enter["ts"] and event["args"]["prepared"] <= enter["ts"]


def test_the_batches_add_up_to_the_kernels_counts(exchange: Any) -> None:
    trace, counts = exchange
    enters = spans(trace, name="io_uring_enter")
    assert len(enters) == counts["enters"], "one io_uring_enter span per system call"
    assert sum(e["args"]["submitted"] for e in enters) == counts["submitted"]
    for enter in enters:
        assert sum(enter["args"]["sqes"].values()) == enter["args"]["submitted"], enter
    prepared = [e for e in trace["traceEvents"] if e.get("name") == "SQE"]
    operations = spans(trace, "operation")
    unfinished = [e for e in operations if e["args"].get("unfinished")]
    # Every operation with a completion to wait for has its SQE mark; those that completed, their span.
    assert len(prepared) == len(operations)
    assert all(e["args"]["enter"] >= 1 for e in operations if not e["args"].get("unfinished"))
    # What is left outstanding is the self-pipe's poll (and, on some kernels, a wait timer).
    assert {e["name"] for e in unfinished} <= {"POLL_ADD", "TIMEOUT"}, unfinished
    # The ring reaped every CQE the recorder saw, and those nobody waits for (NOPs, cancels).
    cqes = [e for e in trace["traceEvents"] if e.get("name") == "CQE"]
    waits = [e for e in trace["traceEvents"] if e.get("name") == "CQEs per io_uring_enter"]
    assert len(cqes) == sum(e["args"]["cqes"] for e in waits) <= counts["completed"]
    # The rest are the CQEs nobody waits for: one per NOP (no cancel in this exchange).
    nobody = sum(enter["args"]["sqes"].get(op, 0) for enter in enters for op in ("NOP", "ASYNC_CANCEL"))
    assert counts["completed"] - len(cqes) == nobody


def test_closing_with_a_receive_outstanding_is_a_cancel_and_an_ecanceled_completion() -> None:
    loop = new_loop(cores()[-1])
    recorder = Recorder(loop.time)
    loop.add_instrument(recorder)
    server, client = socket.socketpair()
    try:
        async def main() -> None:
            transport, protocol = await loop.connect_accepted_socket(Echo, server)
            await asyncio.sleep(0.01)   # the receive is submitted, and no data is coming
            transport.close()
            await protocol.lost
            await until(lambda: any(e["name"] == "RECV" and e["ph"] == "X" for e in recorder.events))

        loop.run_until_complete(main())
    finally:
        client.close()
        loop.close()
    trace = recorder.trace()
    validate(trace)
    receives = [e for e in spans(trace, "operation", "RECV")]
    assert [e["args"]["res"] for e in receives] == [-errno.ECANCELED]
    assert receives[0]["args"]["error"] == "ECANCELED"
    # (The wait timer may be cancelled too, when a nearer deadline replaces it: on its own track.)
    cancels = [e for e in trace["traceEvents"] if e.get("name") == "cancel" and e["tid"] == receives[0]["tid"]]
    assert len(cancels) == 1 and cancels[0]["args"]["user_data"] == receives[0]["args"]["user_data"]
    assert cancels[0]["ts"] <= receives[0]["ts"] + receives[0]["dur"]
    enters = spans(trace, name="io_uring_enter")
    assert any(e["args"]["sqes"].get("ASYNC_CANCEL") for e in enters), "the cancel went to the kernel as an SQE"


def test_with_no_instrument_no_hook_runs_and_no_callback_is_wrapped() -> None:
    loop = new_loop(cores()[-1])
    calls: list[str] = []

    class Counting:
        def sqe_prepared(self, *args: Any) -> None:
            calls.append("sqe")

        def cqe_reaped(self, *args: Any) -> None:
            calls.append("cqe")

    counting = Counting()
    server, client = socket.socketpair()
    try:
        loop.add_instrument(counting)
        assert loop._proactor._instrument is loop._instrument
        assert loop.remove_instrument(counting)
        assert loop._proactor._instrument is None

        async def main() -> None:
            transport, protocol = await loop.connect_accepted_socket(Echo, server)
            client.sendall(b"ping")
            await until(lambda: protocol.echoed(4))
            table = loop._proactor._operations
            # The callbacks as the proactor was given them: the receive's is the transport's own
            # (a method on the python core; on the cython core its TransportCompletion, fast.pyx).
            assert any(getattr(callback, "__self__", None) is transport
                       or callback is getattr(transport, "_on_recv", None) for callback in table.values())
            assert all(getattr(callback, "__name__", None) != "reaped" for callback in table.values())
            transport.close()
            await protocol.lost

        loop.run_until_complete(main())
    finally:
        client.close()
        loop.close()
    assert calls == []


def test_an_instrument_that_raises_is_removed_from_the_proactor_too() -> None:
    loop = new_loop(cores()[-1])

    class Broken:
        def before_enter(self) -> None:
            raise ZeroDivisionError("instrument bug")

    try:
        loop.add_instrument(Broken())
        loop.run_until_complete(asyncio.sleep(0.001))
        assert loop._instrument is None and loop._proactor._instrument is None
    finally:
        loop.close()


# -- the command -------------------------------------------------------------------------

SCRIPT = """
import asyncio

async def main():
    async def handle(reader, writer):
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello\\n")
    assert await reader.readline() == b"hello\\n"
    writer.close()
    server.close()
    await server.wait_closed()
    print(type(asyncio.get_running_loop()).__module__)

asyncio.run(main())
"""


def tinyloop(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tinyloop", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def test_trace_loop_ring_records_a_script(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    result = tinyloop("trace", "--loop", "ring", str(script), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "tinyloop.ring.loop", "the script ran on ring"
    trace = json.loads((tmp_path / "prog-ring.json").read_text())
    validate(trace)
    names = set(track_names(trace).values())
    assert {"ACCEPT fd", "RECV fd", "SEND fd"} <= {name.rsplit(" ", 1)[0] for name in names}, names
    operations = spans(trace, "operation")
    assert any(e["name"] == "ACCEPT" and e["args"]["res"] >= 0 for e in operations)
    assert any(e["name"] == "SEND" and e["args"]["res"] == len(b"hello\n") for e in operations)
    assert spans(trace, name="io_uring_enter")
    page = (tmp_path / "prog-ring.html").read_text()
    assert "io_uring_enter" in page and "SQE (mark)" in page and "CQE (mark)" in page


def test_trace_the_ring_stage_under_load(tmp_path: Path) -> None:
    result = tinyloop("trace", "ring", "--out", str(tmp_path), "--requests", "6", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    trace = json.loads((tmp_path / "ring.json").read_text())
    validate(trace)
    operations = spans(trace, "operation")
    accepted = [e for e in operations if e["name"] == "ACCEPT" and e["args"]["res"] >= 0]
    assert len(accepted) == 2, "the load's two connections"
    answers = [e for e in operations if e["name"] == "SEND"]
    assert len(answers) == 6 and all(e["args"]["res"] > 0 for e in answers), "one send per answer"
    requests = [e for e in operations if e["name"] == "RECV" and e["args"]["res"] > 0]
    assert len(requests) >= 2


@pytest.mark.parametrize("stage", ["uring", "uring-multishot"])
def test_the_raw_io_uring_servers_are_refused_in_one_line(stage: str, tmp_path: Path) -> None:
    result = tinyloop("trace", stage, "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "io_uring_enter" in result.stderr and "ring" in result.stderr
    assert not list(tmp_path.iterdir()), "nothing written"


# -- the book's figures ------------------------------------------------------------------

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
try:
    import trace_figures  # beside the directive that draws the figures
finally:
    sys.path.remove(str(ROOT / "docs" / "_ext"))


def drawn(name: str) -> dict[str, Any]:
    figure = trace_figures.get(name)
    assert figure.reference_file.exists(), f"record it: {figure.command}"
    return figure.drawn(json.loads(figure.reference_file.read_text()))


def test_the_batch_figure_is_one_enter_of_several_sqes_and_their_completions() -> None:
    trace = drawn("completion-batch")
    batch = trace_figures._largest_batch(trace)
    assert len(batch) >= 3, "a batch of several operations, each on its own track"
    enter = [e for e in spans(trace, name="io_uring_enter") if e["args"]["enter"] == batch[0]["args"]["enter"]]
    assert len(enter) == 1 and not enter[0]["args"].get("clipped")
    assert enter[0]["args"]["submitted"] >= len(batch)
    assert all(e["ts"] == enter[0]["ts"] and not e["args"].get("clipped") for e in batch)
    assert {e["name"] for e in batch} >= {"SEND", "RECV"}
    # What the chapter says of it: the CQEs do not come back in the order of the batch.
    assert sorted(batch, key=lambda e: e["ts"] + e["dur"]) != batch
    facts = trace_figures.get("completion-batch").facts(trace)
    assert facts.startswith(f"one io_uring_enter submitted {enter[0]['args']['submitted']} SQEs"), facts


def test_the_request_figure_is_accept_receive_send_and_end_of_file() -> None:
    trace = drawn("completion-request")
    life = trace_figures._connection(trace)
    kinds = [(e["name"], e["args"]["res"] > 0) for e in life]
    assert kinds[0] == ("ACCEPT", True) and kinds[-1] == ("RECV", False)
    assert ("RECV", True) in kinds and ("SEND", True) in kinds
    assert kinds.index(("RECV", True)) < kinds.index(("SEND", True)), "the request, then its answer"
    assert all(not e["args"].get("clipped") for e in life[1:]), "the life is drawn whole after the accept"
    facts = trace_figures.get("completion-request").facts(trace)
    assert "ACCEPT fd" in facts and "(end of file)" in facts, facts
