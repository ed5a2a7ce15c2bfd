# tinyloop/http/parser.py
#
# A sans-I/O parser for HTTP/1.1 requests (RFC 9112): bytes in, requests out.
#
# Rules this file keeps:
#   * No sockets, no clocks, no threads.  ``feed()`` takes the bytes a server
#     read; ``next_request()`` hands back one whole request or ``None`` when it
#     needs more.  The same parser therefore runs under every stage of the book,
#     from a blocking server to a libuv loop, and is tested with bytes alone.
#   * Everything the parser will accept is decided in this file, and every
#     refusal is an ``HTTPError`` carrying the status code a server should
#     answer with (400, 413, 414, 431, 501, 505).  After an error the parser is
#     finished: the connection's framing can no longer be trusted.
#   * Sizes are bounded before they are buffered: a peer cannot make us hold a
#     request line, a header section or a body larger than the limits.

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["HTTPError", "Limits", "Request", "RequestParser"]


class HTTPError(Exception):
    """The peer sent something we will not serve.

    ``status`` is the HTTP status code to answer with (an ``int``);
    ``args[0]`` is a short reason meant for a log line or the response body.
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """Upper bounds, in bytes, on what one request may make the parser buffer.

    The defaults follow common servers: 8 KiB for the request line (nginx's
    ``large_client_header_buffers``), 64 KiB for the whole header section, and
    16 MiB for a body.  Going over answers 414, 431 and 413 respectively.
    """

    max_request_line: int = 8 * 1024
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body: int = 16 * 1024 * 1024


@dataclass(slots=True)
class Request:
    """One parsed request.

    ``method`` and ``target`` are bytes exactly as sent (``b"GET"``, ``b"/"``);
    ``version`` is ``b"1.0"`` or ``b"1.1"``; ``headers`` is a list of
    ``(name, value)`` pairs with names lower-cased and values stripped of the
    optional white space around them, in the order they arrived; ``body`` is the
    whole decoded body (chunked coding removed); ``keep_alive`` says whether the
    connection stays open after the response (RFC 9112 section 9.3).
    """

    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    keep_alive: bool = True
    expects_continue: bool = False

    def header(self, name: bytes, default: bytes | None = None) -> bytes | None:
        """The value of the first header called ``name`` (lower-case bytes), or ``default``."""
        for key, value in self.headers:
            if key == name:
                return value
        return default


# RFC 9110 section 5.6.2: token = 1*tchar.
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([^\x00-\x20\x7f]+) HTTP/(\d)\.(\d)")
_HEADER_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(.*?)[ \t]*")
# Field values: visible characters, obs-text, space and tab; no other controls.
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(;.*)?")
_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_LINE_END = re.compile(rb"\r?\n")


class RequestParser:
    """Turn a byte stream into a sequence of :class:`Request` objects.

    Use::

        parser = RequestParser()
        parser.feed(data)                 # bytes from recv(); b"" means EOF
        while (request := parser.next_request()) is not None:
            ...                           # answer it

    ``next_request()`` returns a complete :class:`Request`, or ``None`` when
    the bytes so far do not hold one (feed more).  It raises :class:`HTTPError`
    on malformed or oversized input; after that the parser is spent and every
    further call raises the same error.  Requests that arrive back to back
    (pipelining, RFC 9112 section 9.3.2) come out one per call, in order.
    """

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._buffer = bytearray()
        self._scan_from = 0  # where the search for the blank line resumes
        self._head: Request | None = None  # headers parsed, body pending
        self._body_left = 0  # Content-Length still to come
        self._chunks: bytearray | None = None  # body so far, when chunked
        self._error: HTTPError | None = None
        self.eof = False

    @property
    def head_pending(self) -> Request | None:
        """The request whose head has been parsed and whose body is still arriving.

        A server uses it to answer ``Expect: 100-continue`` (RFC 9110 section 10.1.1).
        """
        return self._head

    @property
    def buffered(self) -> int:
        """How many received bytes are waiting to be parsed."""
        return len(self._buffer)

    def feed(self, data: bytes) -> None:
        """Append bytes read from the peer; ``b""`` records end of stream."""
        if data:
            self._buffer += data
        else:
            self.eof = True

    def next_request(self) -> Request | None:
        if self._error is not None:
            raise self._error
        try:
            if self._head is None and not self._parse_head():
                return None
            return self._parse_body()
        except HTTPError as error:
            self._error = error
            raise

    # The head: request line and header fields, up to the blank line.

    def _parse_head(self) -> bool:
        buffer = self._buffer
        # RFC 9112 section 2.2: ignore empty lines before the request line.
        while buffer[:2] == b"\r\n" or buffer[:1] == b"\n":
            del buffer[: 2 if buffer[:1] == b"\r" else 1]
        match = _END_OF_HEAD.search(buffer, max(0, self._scan_from - 3))
        if match is None:
            self._scan_from = len(buffer)
            self._check_unfinished_head(buffer)
            return False
        end = match.start()
        head = bytes(buffer[:end])
        del buffer[: match.end()]
        self._scan_from = 0
        if end > self.limits.max_header_bytes:
            raise HTTPError(431, "header section too large")
        lines = _LINE_END.split(head)
        self._head = self._parse_request_line(lines[0])
        self._parse_fields(self._head, lines[1:])
        return True

    def _check_unfinished_head(self, buffer: bytearray) -> None:
        newline = buffer.find(b"\n")
        if newline == -1 and len(buffer) > self.limits.max_request_line:
            raise HTTPError(414, "request line too long")
        if len(buffer) > self.limits.max_header_bytes:
            raise HTTPError(431, "header section too large")

    def _parse_request_line(self, line: bytes) -> Request:
        if len(line) > self.limits.max_request_line:
            raise HTTPError(414, "request line too long")
        match = _REQUEST_LINE.fullmatch(line)
        if match is None:
            raise HTTPError(400, "malformed request line")
        method, target, major, minor = match.groups()
        if major != b"1":
            raise HTTPError(505, "HTTP version not supported")
        version = b"1.1" if minor != b"0" else b"1.0"
        return Request(method, target, version)

    def _parse_fields(self, request: Request, lines: list[bytes]) -> None:
        if len(lines) > self.limits.max_headers:
            raise HTTPError(431, "too many header fields")
        headers = request.headers
        for line in lines:
            match = _HEADER_LINE.fullmatch(line)
            if match is None:
                # Covers obs-fold (a line starting with white space) and white
                # space before the colon, both of which RFC 9112 says to reject.
                raise HTTPError(400, "malformed header field")
            name, value = match.groups()
            if _BAD_VALUE.search(value):
                raise HTTPError(400, "control character in header value")
            headers.append((name.lower(), value))
        self._frame_body(request)

    def _frame_body(self, request: Request) -> None:
        # RFC 9112 section 6: the message body's length.
        lengths: list[bytes] = []
        codings: list[bytes] = []
        connection: list[bytes] = []
        for name, value in request.headers:
            if name == b"content-length":
                lengths.extend(v.strip() for v in value.split(b","))
            elif name == b"transfer-encoding":
                codings.extend(v.strip().lower() for v in value.split(b","))
            elif name == b"connection":
                connection.extend(v.strip().lower() for v in value.split(b","))
            elif name == b"expect" and value.lower() == b"100-continue":
                request.expects_continue = request.version == b"1.1"
        if request.version == b"1.1":
            request.keep_alive = b"close" not in connection
        else:
            request.keep_alive = b"keep-alive" in connection and b"close" not in connection
        if codings:
            # Both framings at once is how request smuggling starts: refuse.
            if lengths:
                raise HTTPError(400, "both Transfer-Encoding and Content-Length")
            if request.version == b"1.0":
                raise HTTPError(400, "Transfer-Encoding in an HTTP/1.0 request")
            if codings != [b"chunked"]:
                raise HTTPError(501, "unsupported transfer coding")
            self._chunks = bytearray()
        elif lengths:
            if any(not v.isdigit() for v in lengths) or len(set(lengths)) != 1:
                raise HTTPError(400, "invalid Content-Length")
            self._body_left = int(lengths[0])
            if self._body_left > self.limits.max_body:
                raise HTTPError(413, "body too large")

    # The body: by Content-Length, or by chunked transfer coding.

    def _parse_body(self) -> Request | None:
        request = self._head
        assert request is not None
        if self._chunks is not None:
            if not self._parse_chunks():
                return None
            request.body = bytes(self._chunks)
            self._chunks = None
        elif self._body_left:
            if len(self._buffer) < self._body_left:
                return None
            request.body = bytes(self._buffer[: self._body_left])
            del self._buffer[: self._body_left]
            self._body_left = 0
        self._head = None
        request.expects_continue = False
        return request

    def _parse_chunks(self) -> bool:
        """Move whole chunks from the buffer into ``self._chunks``; True at the end."""
        buffer, chunks = self._buffer, self._chunks
        assert chunks is not None
        while True:
            newline = buffer.find(b"\n")
            if newline == -1:
                if len(buffer) > self.limits.max_request_line:
                    raise HTTPError(400, "chunk size line too long")
                return False
            size_line = bytes(buffer[:newline]).rstrip(b"\r")
            match = _CHUNK_SIZE.fullmatch(size_line)
            if match is None:
                raise HTTPError(400, "malformed chunk size")
            size = int(match.group(1), 16)
            if size == 0:
                return self._parse_trailers(newline + 1)
            if len(chunks) + size > self.limits.max_body:
                raise HTTPError(413, "body too large")
            start = newline + 1
            end = start + size
            if len(buffer) < end + 2:
                return False
            if buffer[end : end + 2] == b"\r\n":
                after = end + 2
            elif buffer[end : end + 1] == b"\n":
                after = end + 1
            else:
                raise HTTPError(400, "chunk data not followed by CRLF")
            chunks += buffer[start:end]
            del buffer[:after]

    def _parse_trailers(self, start: int) -> bool:
        # Trailer fields are read and dropped; the blank line ends the message.
        buffer = self._buffer
        if buffer[start : start + 2] == b"\r\n":
            del buffer[: start + 2]
            return True
        if buffer[start : start + 1] == b"\n":
            del buffer[: start + 1]
            return True
        match = _END_OF_HEAD.search(buffer, start)
        if match is None:
            if len(buffer) - start > self.limits.max_header_bytes:
                raise HTTPError(431, "trailer section too large")
            return False
        for line in _LINE_END.split(bytes(buffer[start : match.start()])):
            if _HEADER_LINE.fullmatch(line) is None:
                raise HTTPError(400, "malformed trailer field")
        del buffer[: match.end()]
        return True
