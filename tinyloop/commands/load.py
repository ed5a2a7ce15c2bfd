"""The load ``python -m tinyloop trace STAGE`` sends, run as a process of its own.

    python -m tinyloop.commands.load PORT REQUESTS CONCURRENCY COMPUTE_MS [--stop PID]

Rules this module keeps:
  * Never in the traced process.  A client thread there would share the
    server's GIL: a callback's recv or send hands it over, and the callback
    waits to get it back while the thread runs, for up to the switch
    interval (5 ms, ``sys.getswitchinterval()``), longer if the kernel
    runs another process meanwhile.  Callbacks of 0.1 ms were recorded as
    3 to 9 ms on a busy machine.  A process of its own shares nothing.
  * It ends the server as a user would: with ``--stop PID`` it sends that
    process SIGINT (Ctrl-C) once its requests are answered, or failed, or
    after ``LOAD_TIMEOUT`` seconds.
  * Its last line on stdout is how many answers were 200; or ``closed:``
    and why, when the server closed a connection before its answer (it
    was stopped: a Ctrl-C); or ``error:`` and why.  The exit status is 0
    or 1.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import sys
import threading
import time

__all__ = ["LOAD_TIMEOUT", "main", "scripted_load"]

LOAD_TIMEOUT = 30.0   # seconds for the whole scripted load


def scripted_load(host: str, port: int, requests: int, concurrency: int, compute_ms: int = 0,
                  timeout: float = LOAD_TIMEOUT) -> int:
    """Send ``requests`` GETs over ``concurrency`` keep-alive connections; return how many got 200.

    Connection 0's first request is ``/compute?ms=COMPUTE_MS`` when that is
    above 0, the others ``/``.  Each connection sends its share one after
    the other (HTTP/1.1, http.client), from a thread of its own.  All
    connect before any sends; with a ``/compute``, it goes first and the
    others follow 2 ms after it, so that their requests arrive while the
    server computes (what a trace of a stalled loop is meant to show).
    Raises OSError or http.client.HTTPException if the server fails,
    TimeoutError past ``timeout`` seconds.
    """
    counts = [0] * concurrency
    errors: list[BaseException] = []
    shares = [requests // concurrency + (1 if i < requests % concurrency else 0) for i in range(concurrency)]
    connected = threading.Barrier(concurrency)
    computing = threading.Event()

    def client(index: int) -> None:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            connection.connect()
            connected.wait(timeout)
            if compute_ms and index > 0:
                computing.wait(timeout)
                time.sleep(0.002)
            for number in range(shares[index]):
                path = f"/compute?ms={compute_ms}" if compute_ms and index == 0 and number == 0 else "/"
                connection.request("GET", path)
                computing.set()
                response = connection.getresponse()
                response.read()
                counts[index] += response.status == 200
        except BaseException as error:
            errors.append(error)
            connected.abort()   # (the others stop waiting for this one)
            computing.set()
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise TimeoutError(f"the load did not finish in {timeout} s")
    if errors:
        raise errors[0]
    return sum(counts)


def main(argv: list[str] | None = None) -> int:
    """Run the load as the command line asks; 0 if every request got its answer, else 1."""
    parser = argparse.ArgumentParser(prog="python -m tinyloop.commands.load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("port", type=int)
    parser.add_argument("requests", type=int)
    parser.add_argument("concurrency", type=int)
    parser.add_argument("compute_ms", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--stop", type=int, metavar="PID", help="send PID SIGINT when done")
    args = parser.parse_args(argv)
    status = 1
    try:
        answered = scripted_load(args.host, args.port, args.requests, args.concurrency, args.compute_ms)
        print(answered, flush=True)
        status = 0
    except Exception as error:
        kind = "closed" if isinstance(error, ConnectionError) else "error"
        print(f"{kind}: {type(error).__name__}: {error}", flush=True)
    finally:
        if args.stop:
            os.kill(args.stop, signal.SIGINT)   # the server's way to stop, as Ctrl-C
    return status


if __name__ == "__main__":
    sys.exit(main())
