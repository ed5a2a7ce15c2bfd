"""Responses to bytes.  The rules this file keeps:
  * A response always says how long its body is (Content-Length; 1xx and
    204 responses have no body), so the peer finds its end without waiting
    for the connection to close, and keep-alive works for HTTP/1.0 and 1.1.
  * The status line always says HTTP/1.1, the version we implement, even to
    an HTTP/1.0 client (RFC 9110 section 2.5); what changes for 1.0 is only
    the Connection header that keep-alive needs.
  * No clock is read here: the Date header's value is passed in, and
    ``http_date`` turns a time it is given into one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

__all__ = ["Response", "http_date", "render"]


@dataclass(slots=True)
class Response:
    """What an application returns.

    ``status`` is the status code (an ``int``), ``body`` the content (bytes),
    ``content_type`` the Content-Type value, and ``headers`` any further
    ``(name, value)`` byte pairs.  :func:`render` writes Content-Type,
    Content-Length, Connection and Date itself: ``headers`` must not repeat them.
    """

    status: int = 200
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    content_type: bytes = b"text/plain; charset=utf-8"


# RFC 9110 renamed a few statuses that the standard library still knows by
# their older names (Python 3.13 has the new ones).
_NEW_REASONS = {413: "Content Too Large", 414: "URI Too Long", 416: "Range Not Satisfiable",
                422: "Unprocessable Content"}


def _reason(status: int) -> bytes:
    """The reason phrase for ``status``; a client must not depend on it (RFC 9112 section 4)."""
    try:
        phrase = _NEW_REASONS.get(status) or HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return phrase.encode("ascii")


# Status lines are few and asked for on every response: build each once.
_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, _reason(status))
    return line


def render(response: Response, *, version: bytes = b"1.1", keep_alive: bool = True,
           head_only: bool = False, date: bytes | None = None) -> bytes:
    """Serialise ``response``, answering a request of HTTP ``version`` (``b"1.0"`` or ``b"1.1"``).

    ``keep_alive`` says whether the connection stays open after it, and
    decides the ``Connection`` header (RFC 9112 section 9.3): ``close`` when
    we will close; ``keep-alive`` for an HTTP/1.0 client that asked to stay
    open, which otherwise assumes we close (ApacheBench's ``-k`` waits for
    it); none for HTTP/1.1, where staying open is the default.

    ``head_only`` leaves out the body but keeps its Content-Length, as a
    response to HEAD must (RFC 9110 section 9.3.2).  A 1xx or 204 response has
    no content headers at all (RFC 9110 section 8.6).  ``date`` is the Date
    header's value (see :func:`http_date`), or None to send no Date.

    Returns the response's bytes, head and body joined.
    """
    status = response.status
    parts = [_status_line(status)]
    if date is not None:
        parts.append(b"Date: %s\r\n" % date)
    if status >= 200 and status != 204:
        parts.append(b"Content-Type: %s\r\nContent-Length: %d\r\n"
                     % (response.content_type, len(response.body)))
    if not keep_alive:
        parts.append(b"Connection: close\r\n")
    elif version == b"1.0":
        parts.append(b"Connection: keep-alive\r\n")
    for name, value in response.headers:
        parts.append(b"%s: %s\r\n" % (name, value))
    parts.append(b"\r\n")
    if not head_only:
        parts.append(response.body)
    return b"".join(parts)


_last_date: tuple[int, bytes] = (0, b"")


def http_date(now: float) -> bytes:
    """``now`` (seconds since the epoch, as from ``time.time()``) as an HTTP date.

    The result looks like ``b"Sun, 06 Nov 1994 08:49:37 GMT"`` (IMF-fixdate,
    RFC 9110 section 5.6.7).  An origin server with a clock must send it in
    every 2xx, 3xx and 4xx response (section 6.6.1).  The text changes once
    a second, so the last one is kept and made again only when it does.
    """
    global _last_date
    second = int(now)
    if _last_date[0] != second:
        _last_date = (second, formatdate(second, usegmt=True).encode("ascii"))
    return _last_date[1]
