"""The one small application every stage serves, so that the benchmark table
compares loops and nothing else:

  GET  /        a short fixed body
  POST /echo    the request body, back again (exercises uploads and reads)
  GET  /compute?ms=N
                burn N milliseconds of CPU (at most 1000) before answering:
                the handler that shows what cooperative scheduling costs
  anything else 404, or 405 for a known path with the wrong method
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tinyloop.http.parser import Request
from tinyloop.http.response import Response

__all__ = ["HELLO", "MAX_COMPUTE_MS", "burn_cpu", "hello_app"]

HELLO = b"Hello, World!\n"
MAX_COMPUTE_MS = 1000


def burn_cpu(milliseconds: float) -> None:
    """Keep this thread busy computing for ``milliseconds`` of wall time."""
    deadline = time.perf_counter() + milliseconds / 1000
    while time.perf_counter() < deadline:
        sum(range(1000))


def hello_app(request: Request, compute: Callable[[int], object] = burn_cpu) -> Response:
    """Answer ``request`` (a :class:`~tinyloop.http.parser.Request`); never raises.

    ``compute(milliseconds)`` does the work of ``/compute``; by default it
    burns the CPU here and now.  A cooperative server passes a function that
    only records the debt and pays it later in slices, between which other
    tasks run (the coroutines stage does).
    """
    path = _path(request.target)
    if path == b"/":
        if request.method in (b"GET", b"HEAD"):
            return Response(200, HELLO)
        return Response(405, b"Method Not Allowed\n", [(b"Allow", b"GET, HEAD")])
    if path == b"/echo":
        if request.method == b"POST":
            return Response(200, request.body, content_type=b"application/octet-stream")
        return Response(405, b"Method Not Allowed\n", [(b"Allow", b"POST")])
    if path == b"/compute":
        if request.method not in (b"GET", b"HEAD"):
            return Response(405, b"Method Not Allowed\n", [(b"Allow", b"GET, HEAD")])
        milliseconds = _query_int(request.target, b"ms")
        if milliseconds is None or not 0 <= milliseconds <= MAX_COMPUTE_MS:
            return Response(400, b"expected /compute?ms=N with 0 <= N <= %d\n" % MAX_COMPUTE_MS)
        compute(milliseconds)
        return Response(200, b"computed for %d ms\n" % milliseconds)
    return Response(404, b"Not Found\n")


def _path(target: bytes) -> bytes:
    """The path of a request target, without its query.

    Clients send the origin-form ``/a?b``; a server must also accept the
    absolute-form ``http://host/a?b`` (RFC 9112 section 3.2.2).  Other forms
    (``*``, ``host:port``) come back as they are, and match no route.
    """
    if target[:1] != b"/":
        _, scheme_end, rest = target.partition(b"://")
        if scheme_end:
            target = b"/" + rest.partition(b"/")[2]
    return target.partition(b"?")[0]


def _query_int(target: bytes, key: bytes) -> int | None:
    """The value of the first ``key=DIGITS`` in the target's query string, or None.

    None also when the value is not 1 to 9 ASCII digits: a longer one would
    be out of range anyway, and ``int()`` refuses numbers of more than 4300
    digits with an exception (CPython's int_max_str_digits).
    """
    for pair in target.partition(b"?")[2].split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == key:
            return int(value) if value.isdigit() and len(value) <= 9 else None
    return None
