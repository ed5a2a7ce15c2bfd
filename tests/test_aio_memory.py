"""What an idle aio connection costs in memory: a transport that has buffered nothing
allocates no write-queue storage (benchmarks/memory.py measures the whole connection)."""

from __future__ import annotations

import asyncio
import socket
import tracemalloc

import tinyloop.aio
from tinyloop.aio import selector_events

# What a plain transport's construction allocates in selector_events.py (the
# transport, its extra-info table, the socket's address) is about 600 bytes on
# 3.11-3.13; an eagerly allocated deque block would add about 700 more.
LIMIT = 1000


def test_an_idle_transport_allocates_no_write_queue_block() -> None:
    loop = tinyloop.aio.new_event_loop()
    near, far = socket.socketpair()
    transport = None
    try:
        tracemalloc.start()
        try:
            transport = loop._make_socket_transport(near, asyncio.Protocol())
            snapshot = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        mine = snapshot.filter_traces([tracemalloc.Filter(True, selector_events.__file__)])
        allocated = sum(stat.size for stat in mine.statistics("filename"))
        assert allocated < LIMIT, (
            f"a new transport allocated {allocated} bytes in selector_events.py; an idle "
            f"connection should not pay for a write queue it has not used:\n"
            + "\n".join(str(stat) for stat in mine.statistics("lineno")[:5]))
        transport.close()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        if transport is None:
            near.close()
        far.close()
        loop.close()
