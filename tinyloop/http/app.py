# tinyloop/http/app.py
#
# The one small application every stage serves, so that the benchmark table
# compares loops and nothing else:
#
#   GET  /        a short fixed body
#   POST /echo    the request body, back again (exercises uploads and reads)
#   anything else 404, or 405 for a known path with the wrong method

from __future__ import annotations

from .parser import Request
from .response import Response

__all__ = ["HELLO", "hello_app"]

HELLO = b"Hello, World!\n"


def hello_app(request: Request) -> Response:
    """Answer ``request`` (a :class:`~tinyloop.http.parser.Request`); never raises."""
    path = request.target.split(b"?", 1)[0]
    if path == b"/":
        if request.method in (b"GET", b"HEAD"):
            return Response(200, HELLO)
        return Response(405, b"Method Not Allowed\n", [(b"Allow", b"GET, HEAD")])
    if path == b"/echo":
        if request.method == b"POST":
            return Response(200, request.body, content_type=b"application/octet-stream")
        return Response(405, b"Method Not Allowed\n", [(b"Allow", b"POST")])
    return Response(404, b"Not Found\n")
