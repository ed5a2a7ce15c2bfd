# tinyloop/http/connection.py
#
# One server-side HTTP connection, still without I/O: the parser, the
# application and the rules for keep-alive joined into a single call,
#
#     outgoing = connection.receive_data(incoming)
#
# which is all that every stage's server needs.  Whatever the stage (a thread,
# a readiness loop, a coroutine), it reads bytes, hands them here, writes what
# comes back, and closes when ``should_close`` is true and the output is sent.
#
# Pipelined requests that arrive in one read are answered in one string of
# bytes, in order, so a server sends them with one system call (the Japronto
# lesson: fewer, larger writes).

from __future__ import annotations

from collections.abc import Callable

from .app import hello_app
from .parser import HTTPError, Limits, Request, RequestParser
from .response import Response, render

__all__ = ["HTTPConnection"]

App = Callable[[Request], Response]

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HTTPConnection:
    """The HTTP state of one connection: bytes in, response bytes out.

    ``app`` maps a :class:`Request` to a :class:`Response` (default:
    :func:`~tinyloop.http.app.hello_app`).  A malformed request is answered
    with its error status (400, 413, 414, 431, 501 or 505) and
    ``Connection: close``; the error never escapes to the server.
    """

    def __init__(self, app: App = hello_app, limits: Limits | None = None) -> None:
        self.app = app
        self.parser = RequestParser(limits)
        self.should_close = False
        self.requests_served = 0
        self._continued: Request | None = None

    def receive_data(self, data: bytes) -> bytes:
        """Take bytes from the peer (``b""`` at end of stream); return bytes to send.

        The result may be empty (a request is still incomplete) or hold several
        responses (pipelining).  Once ``should_close`` is true the server sends
        what it has and closes; later input is ignored and gives ``b""``.
        """
        if self.should_close:
            return b""
        parser = self.parser
        parser.feed(data)
        out: list[bytes] = []
        while True:
            try:
                request = parser.next_request()
            except HTTPError as error:
                out.append(_error_response(error))
                self.should_close = True
                break
            if request is None:
                pending = parser.head_pending
                if pending is not None and pending.expects_continue and pending is not self._continued:
                    self._continued = pending
                    out.append(_CONTINUE)
                break
            keep_alive = request.keep_alive and not parser.eof
            out.append(render(self.app(request), version=request.version,
                              keep_alive=keep_alive, head_only=request.method == b"HEAD"))
            self.requests_served += 1
            if not keep_alive:
                self.should_close = True
                break
        if parser.eof:
            # The peer has finished sending: answer what was complete, then close.
            self.should_close = True
        return b"".join(out)


def _error_response(error: HTTPError) -> bytes:
    body = b"%d %s\n" % (error.status, str(error).encode("ascii", "replace"))
    return render(Response(error.status, body), version=b"1.1", keep_alive=False)
