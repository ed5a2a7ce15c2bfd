# tinyloop/http/response.py
#
# Responses to bytes.  The one rule: a response always says how long its body
# is (Content-Length), so the peer can find the end of it without waiting for
# the connection to close, and keep-alive works for HTTP/1.0 and 1.1 alike.

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus

__all__ = ["Response", "render"]


@dataclass(slots=True)
class Response:
    """What an application returns: ``status`` (an ``int``), ``body`` (bytes),
    and extra ``headers`` as ``(name, value)`` byte pairs."""

    status: int = 200
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    content_type: bytes = b"text/plain; charset=utf-8"


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b"Unknown"


# Status lines are few and asked for on every response: build each once.
_STATUS_LINES: dict[tuple[bytes, int], bytes] = {}


def _status_line(version: bytes, status: int) -> bytes:
    key = (version, status)
    line = _STATUS_LINES.get(key)
    if line is None:
        line = b"HTTP/%s %d %s\r\n" % (version, status, _reason(status))
        _STATUS_LINES[key] = line
    return line


def render(response: Response, *, version: bytes = b"1.1", keep_alive: bool = True,
           head_only: bool = False) -> bytes:
    """Serialise ``response`` for a request of HTTP ``version`` (``b"1.0"`` or ``b"1.1"``).

    ``keep_alive`` adds the ``Connection`` header the peer needs: ``close`` when
    we will close, ``keep-alive`` for an HTTP/1.0 peer that asked to stay open
    (ApacheBench's ``-k`` relies on it).  ``head_only`` leaves out the body but
    keeps its Content-Length, as a response to HEAD must (RFC 9110 section 9.3.2).
    """
    parts = [
        _status_line(version, response.status),
        b"Content-Type: %s\r\nContent-Length: %d\r\n" % (response.content_type, len(response.body)),
    ]
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
