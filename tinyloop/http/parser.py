"""A sans-I/O parser for HTTP/1.1 requests (RFC 9112): bytes in, requests out.

Rules this file keeps:
  * No sockets, no clocks, no threads.  ``feed()`` takes the bytes a server
    read; ``next_request()`` hands back one whole request or ``None`` when it
    needs more.  The same parser therefore runs under every stage of the book,
    from a blocking server to a libuv loop, and is tested with bytes alone.
  * Everything the parser will accept is decided in this file, and every
    refusal is an ``HTTPError`` carrying the status code a server should
    answer with (400, 413, 414, 431, 501, 505).  After an error the parser is
    finished: the connection's framing can no longer be trusted.
  * Sizes are bounded before they are buffered: a peer cannot make us hold a
    request line, a head or a body larger than the limits.  Searches resume
    where the last one stopped, or look at most one line's limit back, so a
    peer that sends one byte at a time cannot make the work quadratic.
  * Where the RFC lets a recipient choose between leniency and refusal, we
    refuse whatever could make two parsers disagree about where a message
    ends (request smuggling), and are lenient only where it cannot.

Reading order: the grammar (regular expressions), then ``RequestParser``:
the head (request line and fields), its framing (how long is the body?),
then the body, by Content-Length or by chunked transfer coding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["HTTPError", "Limits", "Request", "RequestParser"]


class HTTPError(Exception):
    """The peer sent something we will not serve.

    ``status`` is the HTTP status code to answer with (an ``int``: 400, 413,
    414, 431, 501 or 505); ``args[0]`` is a short reason meant for a log line
    or the response body.
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """Upper bounds on what one request may make the parser buffer.

    Sizes are in bytes and count the bytes as received, line endings
    included unless said otherwise.  A value exactly at a limit is accepted;
    one byte (or one field) more is refused with the status in brackets.

    ``max_request_line``
        the request line, without its line ending [414].  8 KiB, like
        nginx's ``large_client_header_buffers``.
    ``max_header_bytes``
        the whole head: request line, header fields and the empty line that
        ends them [431].  Also bounds a chunked body's trailer section.
    ``max_headers``
        the number of header fields [431].
    ``max_body``
        the body after any chunked coding is removed [413].
    ``max_chunk_line``
        one chunk-size line with its extensions, without the CRLF [400].
    """

    max_request_line: int = 8 * 1024
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body: int = 16 * 1024 * 1024
    max_chunk_line: int = 4 * 1024


@dataclass(slots=True)
class Request:
    """One parsed request.

    ``method`` and ``target`` are bytes exactly as sent (``b"GET"``, ``b"/"``).
    ``version`` is ``b"1.0"`` or ``b"1.1"``: a request of HTTP/1.2 or later
    minor versions is read as 1.1, the highest we implement (RFC 9110 section
    2.5).  ``headers`` is a list of ``(name, value)`` pairs with names
    lower-cased and values as sent less the white space around them, in the
    order they arrived.  ``body`` is the whole body with any chunked coding
    removed (trailer fields are checked and dropped, RFC 9110 section 6.5.1).

    ``keep_alive`` says whether the connection may stay open after the
    response (RFC 9112 section 9.3).  ``expects_continue`` is true while the
    client waits for an interim ``100 Continue`` before it sends the body
    (RFC 9110 section 10.1.1); a complete request always has it false.
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


_DEFAULT_LIMITS = Limits()  # made once: a frozen dataclass is slow to build, and connections are many


# The grammar, from RFC 9110 section 5.6 and RFC 9112 sections 3, 5 and 7.
#
# Lines may end in CRLF or a bare LF in the head and the trailer section
# (RFC 9112 section 2.2 allows it), but only in CRLF around chunks, where
# disagreeing with a proxy about a line ending is how a body is smuggled.

_TCHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_TOKEN = rb"[" + re.escape(_TCHARS) + rb"]+"
# A field value: runs of visible characters (VCHAR, and obs-text 0x80-0xFF)
# joined by spaces or tabs.  Control characters, CR and NUL are refused
# (RFC 9110 section 5.5).  The white space around the value is not part of it.
_VCHARS = rb"[\x21-\x7e\x80-\xff]+"
_VALUE = rb"(?:" + _VCHARS + rb"(?:[ \t]+" + _VCHARS + rb")*)?"
# request-line = method SP request-target SP HTTP-version; the target's
# URI grammar allows visible ASCII only (RFC 9112 section 3.2).
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/([0-9])\.([0-9])\r?\n")
_FIELD_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _VALUE + rb")[ \t]*\r?\n")
# The empty line that ends a head or a trailer section, found from the line
# ending before it.
_BLANK_LINE = re.compile(rb"\n\r?\n")
# chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF, with
# chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
# Sizes of more than 16 hex digits (64 bits) are refused.  Trailing white
# space after the line is tolerated, as many parsers do.
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
_CHUNK_EXT = (rb"(?:[ \t]*;[ \t]*" + _TOKEN
              + rb"(?:[ \t]*=[ \t]*(?:" + _TOKEN + rb"|" + _QUOTED + rb"))?)*")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})" + _CHUNK_EXT + rb"[ \t]*")

# The fields that decide a request's framing and persistence (lower-case).
_FRAMING_FIELDS = frozenset([b"host", b"connection", b"content-length", b"transfer-encoding", b"expect"])


class RequestParser:
    """Turn a byte stream into a sequence of :class:`Request` objects.

    Use::

        parser = RequestParser()
        parser.feed(data)                 # bytes from recv(); b"" means EOF
        while (request := parser.next_request()) is not None:
            ...                           # answer it

    ``limits`` (a :class:`Limits`) bounds what one request may make it buffer.
    Requests that arrive back to back (pipelining, RFC 9112 section 9.3.2)
    come out one per call, in order.  How the input was split into ``feed()``
    calls never changes the result.
    """

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or _DEFAULT_LIMITS
        self.eof = False  # the peer has finished sending (feed(b""))
        self._buffer = bytearray()  # received, not yet parsed
        self._searched = 0  # bytes of an incomplete head already searched for its end
        self._head: Request | None = None  # head parsed, body pending
        self._body_left = 0  # Content-Length bytes still to come
        self._chunks: bytearray | None = None  # the body so far, when chunked
        self._error: HTTPError | None = None  # once set, raised by every call

    @property
    def head_pending(self) -> Request | None:
        """The request whose head has been parsed and whose body is still arriving, or None.

        A server uses it to answer ``Expect: 100-continue`` (RFC 9110 section 10.1.1).
        """
        return self._head

    @property
    def buffered(self) -> int:
        """How many received bytes are waiting to be parsed."""
        return len(self._buffer)

    def feed(self, data: bytes) -> None:
        """Append ``data``, bytes read from the peer; ``b""`` records end of stream.

        Feeding is cheap and never raises: all checking happens in
        :meth:`next_request`.
        """
        if data:
            self._buffer += data
        else:
            self.eof = True

    def next_request(self) -> Request | None:
        """The next complete request, or ``None`` if the bytes so far do not hold one.

        ``None`` means: feed more.  After end of stream it means the peer left
        in the middle of a request (or between requests), and there is nothing
        to answer.

        Raises :class:`HTTPError` on malformed or oversized input, the first
        time and every time after: the parser is then spent.
        """
        if self._error is not None:
            raise self._error
        try:
            if self._head is None:
                self._head = self._parse_head()
                if self._head is None:
                    return None
            return self._parse_body()
        except HTTPError as error:
            self._error = error
            raise

    # The head: request line and header fields, up to the empty line.

    def _parse_head(self) -> Request | None:
        buffer = self._buffer
        if not buffer:
            return None  # the usual state between requests on a kept-alive connection
        if buffer[0] in b"\r\n":
            # RFC 9112 section 2.2: a server SHOULD ignore empty lines received
            # before the request line (some clients send one after a body).
            # This moves no saved offset: ``_searched`` is nonzero only once
            # a request line has begun, and so the buffer starts with a token.
            _strip_empty_lines(buffer)
        end = _BLANK_LINE.search(buffer, self._searched)
        if end is None:
            # The next search resumes here, less the two bytes of a line
            # ending that the next feed may complete.
            self._searched = max(0, len(buffer) - 2)
            self._check_head_so_far(len(buffer))
            return None
        self._searched = 0
        limits = self.limits
        line = _REQUEST_LINE.match(buffer)
        if line is None or end.end() > limits.max_header_bytes or line.end() > limits.max_request_line + 1:
            self._check_head_so_far(end.end())
            if line is None:
                raise HTTPError(400, "malformed request line")
        method, target, major, minor = line.groups()
        if major != b"1":
            # HTTP/2 and later start with a different preface, and HTTP/0.9
            # had no version at all: neither is a version we can answer.
            raise HTTPError(505, "HTTP version not supported")
        request = Request(method, target, b"1.0" if minor == b"0" else b"1.1",
                          self._parse_fields(buffer, line.end(), end.start() + 1, "header"))
        del buffer[: end.end()]
        self._frame(request)
        return request

    def _check_head_so_far(self, size: int) -> None:
        """Refuse a head, complete or not, that is already sure to be too long or not HTTP.

        ``size`` is the head's length in bytes, or a lower bound on it.

        Discussion: these checks run in the same order whether the head is
        complete or still arriving, so that one input gives the same answer
        however it was split.  A complete, well-formed head of modest size
        never comes here.
        """
        buffer = self._buffer
        if buffer[:1] not in _TCHARS and buffer != b"\r":
            # A request line starts with a method token.  This is more likely
            # a TLS handshake (0x16) sent to a plain-text port.
            raise HTTPError(400, "not an HTTP request")
        limit = self.limits.max_request_line
        newline = buffer.find(b"\n", 0, limit + 2)
        if newline == -1:
            length = min(len(buffer), limit + 2)
            length -= buffer[length - 1 : length] == b"\r"  # a CR may start the line ending
        else:
            length = newline - (buffer[newline - 1 : newline] == b"\r")
        if length > limit:
            raise HTTPError(414, "request line too long")
        if size > self.limits.max_header_bytes:
            raise HTTPError(431, "request head too large")

    def _parse_fields(self, buffer: bytearray, pos: int, end: int,
                      kind: str) -> list[tuple[bytes, bytes]]:
        """The fields in ``buffer[pos:end]``, a whole number of lines."""
        fields = []
        limit = self.limits.max_headers
        while pos < end:
            match = _FIELD_LINE.match(buffer, pos)
            if match is None:
                # Also covers obs-fold (a line starting with white space) and
                # white space before the colon, which RFC 9112 section 5
                # says to refuse.
                raise HTTPError(400, f"malformed {kind} field")
            name, value = match.groups()
            fields.append((name.lower(), value))
            pos = match.end()
        if len(fields) > limit:
            raise HTTPError(431, f"too many {kind} fields")
        return fields

    def _frame(self, request: Request) -> None:
        """Read the fields that decide keep-alive and the body's length.

        RFC 9112 section 6.3 decides the length; section 9.3 the persistence.
        """
        lengths: list[bytes] = []
        codings: list[bytes] | None = None  # None: no Transfer-Encoding field at all
        connection: list[bytes] = []
        hosts = 0
        for name, value in request.headers:
            if name not in _FRAMING_FIELDS:
                continue  # most fields, and all of them in the usual GET
            if name == b"host":
                hosts += 1
            elif name == b"connection":
                connection += _split_list(value.lower())
            elif name == b"content-length":
                # Not a list field, but RFC 9110 section 8.6 lets "42, 42"
                # (a repeated field, joined) be read as 42: split, keep empties.
                lengths += [length.strip(b" \t") for length in value.split(b",")]
            elif name == b"transfer-encoding":
                codings = (codings or []) + _split_list(value.lower())
            elif name == b"expect":
                # RFC 9110 section 10.1.1: an HTTP/1.0 client cannot wait for 100.
                if b"100-continue" in _split_list(value.lower()) and request.version == b"1.1":
                    request.expects_continue = True
        # RFC 9112 section 3.2: exactly one Host, and always one in HTTP/1.1.
        if hosts > 1 or (hosts == 0 and request.version == b"1.1"):
            raise HTTPError(400, "missing or repeated Host header")
        if request.version == b"1.1":
            request.keep_alive = b"close" not in connection
        else:
            request.keep_alive = b"keep-alive" in connection and b"close" not in connection

        if codings is not None:
            # Discussion: RFC 9112 section 6.3 lets Transfer-Encoding override
            # Content-Length, but a message that carries both is how request
            # smuggling starts: a proxy in front of us may have used the other
            # one.  We refuse, as the RFC allows.  An HTTP/1.0 message with
            # Transfer-Encoding is faulty framing (section 6.1).  Chunked must
            # be the last coding, applied once (section 7); if it is not, the
            # body's end cannot be found and the answer is 400, not 501.
            if lengths:
                raise HTTPError(400, "both Transfer-Encoding and Content-Length")
            if request.version == b"1.0":
                raise HTTPError(400, "Transfer-Encoding in an HTTP/1.0 request")
            if codings[-1:] != [b"chunked"] or codings.count(b"chunked") > 1:
                raise HTTPError(400, "chunked is not the final transfer coding")
            if len(codings) > 1:
                raise HTTPError(501, "unsupported transfer coding")
            self._chunks = bytearray()
        elif lengths:
            if not all(length.isdigit() for length in lengths) or len(set(lengths)) != 1:
                raise HTTPError(400, "invalid Content-Length")
            # More than 19 digits is more than 2**63 bytes; and int() would
            # refuse a few thousand digits with a ValueError of its own.
            if len(lengths[0]) > 19 or int(lengths[0]) > self.limits.max_body:
                raise HTTPError(413, "body too large")
            self._body_left = int(lengths[0])

    # The body: by Content-Length, or by chunked transfer coding.

    def _parse_body(self) -> Request | None:
        request = self._head
        assert request is not None
        buffer = self._buffer
        if self._chunks is not None:
            if not self._parse_chunks():
                return None
            request.body = bytes(self._chunks)
            self._chunks = None
        elif self._body_left:
            if len(buffer) < self._body_left:
                return None
            request.body = bytes(buffer[: self._body_left])
            del buffer[: self._body_left]
            self._body_left = 0
        self._head = None
        request.expects_continue = False
        return request

    def _parse_chunks(self) -> bool:
        """Move whole chunks from the buffer into the body; True once the body ended.

        Only complete chunks are consumed, so an incomplete one is parsed
        again from its size line when more bytes come: a few bytes of work
        per call, since its data is not searched.
        """
        buffer, body, limits = self._buffer, self._chunks, self.limits
        assert body is not None
        while True:
            crlf = buffer.find(b"\r\n", 0, limits.max_chunk_line + 2)
            if crlf == -1:
                if len(buffer) > limits.max_chunk_line + 1:
                    raise HTTPError(400, "chunk size line too long")
                return False
            line = _CHUNK_LINE.fullmatch(buffer, 0, crlf)
            if line is None:
                raise HTTPError(400, "malformed chunk size line")
            size = int(line.group(1), 16)
            if size == 0:
                return self._parse_trailers(crlf + 2)
            if len(body) + size > limits.max_body:
                raise HTTPError(413, "body too large")
            start = crlf + 2
            end = start + size
            if len(buffer) < end + 2:
                return False
            if buffer[end : end + 2] != b"\r\n":
                raise HTTPError(400, "chunk data not followed by CRLF")
            body += buffer[start:end]
            del buffer[: end + 2]

    def _parse_trailers(self, start: int) -> bool:
        """Check and drop the trailer section at ``buffer[start:]``; True once it ended."""
        buffer = self._buffer
        if buffer[start : start + 1] == b"\n":
            end = start + 1  # no trailers: the empty line, bare LF
        elif buffer[start : start + 2] == b"\r\n":
            end = start + 2  # no trailers: the usual case
        else:
            # The last-chunk line stays at the front of the buffer until the
            # section ends, so ``start`` does not move between calls and the
            # search can resume where it stopped, as for the head.
            blank = _BLANK_LINE.search(buffer, max(start, self._searched))
            size = (len(buffer) if blank is None else blank.end()) - start  # or a lower bound
            if size > self.limits.max_header_bytes:
                raise HTTPError(431, "trailer section too large")
            if blank is None:
                self._searched = max(start, len(buffer) - 2)
                return False
            self._searched = 0
            self._parse_fields(buffer, start, blank.start() + 1, "trailer")
            end = blank.end()
        del buffer[:end]
        return True


def _strip_empty_lines(buffer: bytearray) -> None:
    """Delete CRLF and LF line endings from the front of ``buffer``."""
    while True:
        if buffer[:1] == b"\n":
            del buffer[:1]
        elif buffer[:2] == b"\r\n":
            del buffer[:2]
        else:
            return


def _split_list(value: bytes) -> list[bytes]:
    """The elements of a comma-separated field value, empty ones left out (RFC 9110 section 5.6.1).

    ``value`` comes from the field grammar, without white space around it.
    """
    if b"," not in value:
        return [value] if value else []  # one element: the usual case, made quick
    return [item for item in (part.strip(b" \t") for part in value.split(b",")) if item]
