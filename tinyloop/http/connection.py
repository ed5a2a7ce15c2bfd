"""One server-side HTTP connection, still without I/O: the parser, the
application and the rules for keep-alive joined into a single call,

    outgoing = connection.receive_data(incoming)

which is all that every stage's server needs.  Whatever the stage (a thread,
a readiness loop, a coroutine), it reads bytes, hands them here, writes what
comes back, and closes when ``should_close`` is true and the output is sent.

Rules this file keeps:
  * ``receive_data`` never raises on anything the peer sends: a malformed
    request becomes an error response and ``should_close``.
  * Pipelined requests that arrive in one read are answered in one string
    of bytes, in order, so a server sends them with one system call (the
    Japronto lesson: fewer, larger writes).
  * Nothing is answered after a response that closes the connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tinyloop.http.app import hello_app
from tinyloop.http.parser import HTTPError, Limits, Request, RequestParser
from tinyloop.http.response import Response, http_date, render

__all__ = ["HTTPConnection"]

App = Callable[[Request], Response]

# The interim response that tells a client to go on and send its body
# (RFC 9110 section 15.2.1).
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HTTPConnection:
    """The HTTP state of one connection: bytes in, response bytes out.

    ``app`` maps a :class:`Request` to a :class:`Response` (default:
    :func:`~tinyloop.http.app.hello_app`); exceptions it raises are not
    caught.  ``limits`` bounds each request (see :class:`Limits`).
    ``clock`` gives the time in seconds since the epoch for the Date header
    (default ``time.time``); ``None`` sends no Date, which tests use to get
    the same bytes on every run.

    ``should_close`` becomes true when the server must close the connection
    once it has sent what ``receive_data`` returned: after a response with
    ``Connection: close``, after an error response, or at end of stream.
    ``requests_served`` counts the requests answered by ``app``.
    """

    def __init__(self, app: App = hello_app, limits: Limits | None = None,
                 clock: Callable[[], float] | None = time.time) -> None:
        self.app = app
        self.parser = RequestParser(limits)
        self.clock = clock
        self.should_close = False
        self.requests_served = 0

    def receive_data(self, data: bytes) -> bytes:
        """Take ``data`` from the peer (``b""`` at end of stream); return bytes to send.

        The result may be empty (a request is still incomplete, or the peer
        left), or hold several responses (pipelining), possibly after an
        interim ``100 Continue``.  A malformed request is answered with its
        error status (400, 413, 414, 431, 501 or 505) and ``Connection:
        close``.  Once ``should_close`` is true, later input is ignored and
        gives ``b""``.
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
                out.append(self._error_response(error))
                self.should_close = True
                break
            if request is None:
                pending = parser.head_pending
                if pending is not None and pending.expects_continue:
                    pending.expects_continue = False  # answered: send 100 once
                    out.append(_CONTINUE)
                break
            # A request complete only at end of stream cannot happen: each
            # call answers every complete request it has.  So at end of
            # stream there is nothing to answer, and we only close.
            keep_alive = request.keep_alive
            date = None if self.clock is None else http_date(self.clock())
            out.append(render(self.app(request), version=request.version, keep_alive=keep_alive,
                              head_only=request.method == b"HEAD", date=date))
            self.requests_served += 1
            if not keep_alive:
                self.should_close = True
                break
        if parser.eof:
            # The peer has finished sending: what was incomplete never will be.
            self.should_close = True
        return b"".join(out)

    def _error_response(self, error: HTTPError) -> bytes:
        body = b"%d %s\n" % (error.status, str(error).encode("ascii", "replace"))
        date = None if self.clock is None else http_date(self.clock())
        return render(Response(error.status, body), keep_alive=False, date=date)
