# tests/test_http_differential.py
#
# Our parser against h11, a well-kept one, on requests Hypothesis makes up.
#
# Valid requests (every method, target form, header, body framing, chunking,
# feed split and pipeline Hypothesis can think of, within RFC 9112) must
# parse to the same method, target, version, headers and body in both, and
# in the generator's own model of what it wrote.  httptools (llhttp) is asked
# too, on the subset it reads.
#
# Mutated requests (bytes inserted, deleted, replaced, repeated) check the
# other direction: whenever h11 refuses a message, we refuse it too -- except
# for the differences listed in KNOWN_LENIENCIES, where the RFC asks or lets
# a recipient accept what h11 refuses.  Each one is recognised by its exact
# shape, and also asserted by its own small test, so none can hide another.
#
# Where we are stricter than h11 we are free to be (the RFC lets a server
# refuse); those cases are listed in STRICTER and asserted the same way.

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import h11
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tinyloop.http import HTTPError, Request, RequestParser

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TCHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
VCHARS = bytes(range(0x21, 0x7F))
OBS_TEXT = bytes(range(0x80, 0x100))
# Fields whose meaning either parser acts on; generated on purpose, never at random.
SPECIAL = {b"host", b"content-length", b"transfer-encoding", b"connection", b"expect", b"upgrade"}

# A parsed request: method, target, version, headers, body.
Parsed = tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]], bytes]


# The model: a request as the generator wrote it, and the bytes it wrote.

def bytes_from(alphabet: bytes, min_size: int = 0, max_size: int = 8) -> st.SearchStrategy[bytes]:
    """Bytes drawn from ``alphabet`` (cheaper to generate than a list of sampled bytes)."""
    table = bytes(alphabet[i % len(alphabet)] for i in range(256))
    return st.binary(min_size=min_size, max_size=max_size).map(lambda raw: raw.translate(table))


@functools.cache
def any_case(word: bytes) -> st.SearchStrategy[bytes]:
    """``word`` with each letter in upper or lower case."""
    return st.integers(0, 2 ** len(word) - 1).map(
        lambda mask: b"".join(bytes([c]).upper() if mask >> i & 1 else bytes([c])
                              for i, c in enumerate(word)))


# Strategies are built once, here: building them inside a composite for
# every example costs more than the parsing under test.
tokens = bytes_from(TCHARS, 1, 10)
ows = bytes_from(b" \t", 0, 2)
no_ows = st.just(b"")
any_line_ending = st.sampled_from([b"\r\n", b"\n"])
crlf = st.just(b"\r\n")
positions = st.integers(0, 8)
# field-value (RFC 9110 section 5.5): visible characters and obs-text, with
# spaces and tabs inside but not around.
field_values = bytes_from(VCHARS + OBS_TEXT + b" \t", 0, 16).map(lambda value: value.strip(b" \t"))
field_names = st.one_of(
    st.sampled_from([b"accept", b"user-agent", b"cookie", b"x-request-id", b"accept-encoding",
                     b"cache-control", b"te", b"trailer", b"content-type", b"referer"]).flatmap(any_case),
    tokens,
).filter(lambda name: name.lower() not in SPECIAL)
field_lists = st.lists(st.tuples(field_names, field_values), max_size=5)
trailer_lists = st.lists(st.tuples(field_names, field_values), max_size=2)

common_methods = st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH"])
methods = st.one_of(common_methods, tokens).filter(lambda method: method != b"CONNECT")
targets = st.one_of(
    bytes_from(VCHARS, 0, 30).map(lambda path: b"/" + path),
    st.just(b"*"),
    bytes_from(VCHARS, 0, 10).map(lambda path: b"http://example.org/" + path),
)
hosts = st.sampled_from([b"example.org", b"127.0.0.1:8000", b"[::1]:80", b""])
chunk_sizes = st.integers(1, 24)
# How a chunk size is spelled: hex case and leading zeros (16 digits at most).
size_spellings = st.tuples(st.sampled_from([b"%x", b"%X"]), st.integers(0, 14))
chunk_extensions = st.lists(st.one_of(
    tokens.map(lambda name: b";" + name),
    st.tuples(tokens, tokens).map(lambda pair: b";%s=%s" % pair),
    st.tuples(tokens, bytes_from(b"\t !#[]~\x80\xff", 0, 5)).map(lambda pair: b';%s="%s"' % pair),
    st.tuples(tokens, bytes_from(b"\\\"", 1, 3)).map(  # quoted-pairs: \\ and \"
        lambda pair: b';%s="%s"' % (pair[0], b"".join(b"\\" + bytes([c]) for c in pair[1]))),
), max_size=2).map(b"".join)


@st.composite
def chunked_bodies(draw: st.DrawFn, body: bytes, line_endings: st.SearchStrategy[bytes]) -> bytes:
    """``body`` in chunked coding: random chunk sizes, size spellings, extensions, trailers."""
    def size_line(size: int) -> bytes:
        case, zeros = draw(size_spellings)
        return b"0" * zeros + case % size + draw(chunk_extensions) + b"\r\n"

    out = []
    rest = body
    while rest:
        size = min(draw(chunk_sizes), len(rest))
        out += [size_line(size), rest[:size], b"\r\n"]
        rest = rest[size:]
    eol = draw(line_endings)  # the trailer section may end lines in LF, as the head may
    out += [size_line(0)] + [name + b": " + value + eol for name, value in draw(trailer_lists)] + [eol]
    return b"".join(out)


@st.composite
def requests(draw: st.DrawFn, last: bool = True, for_llhttp: bool = False) -> tuple[bytes, Parsed]:
    """A valid request: its bytes and what any parser must read from them.

    Only the ``last`` request of a pipeline may close the connection (HTTP/1.0
    or Connection: close), since h11 reads nothing after that.  ``for_llhttp``
    keeps to what llhttp reads: methods it knows, CRLF line endings, and no
    white space after a value (it refuses "chunked\t").
    """
    method, target = draw(common_methods if for_llhttp else methods), draw(targets)
    line_endings = crlf if for_llhttp else any_line_ending
    after = no_ows if for_llhttp else ows
    version = draw(st.sampled_from([b"1.0", b"1.1"])) if last else b"1.1"
    fields = draw(field_lists)

    def insert(name: bytes, value: bytes) -> None:
        fields.insert(min(draw(positions), len(fields)), (draw(any_case(name)), value))

    if version == b"1.1" or draw(st.booleans()):
        insert(b"host", draw(hosts))
    if last and version == b"1.1" and draw(st.booleans()):
        insert(b"connection", b"close")
    body = draw(st.binary(max_size=40))
    if version == b"1.1" and draw(st.booleans()):
        insert(b"transfer-encoding", draw(any_case(b"chunked")))
        wire_body = draw(chunked_bodies(body, line_endings))
    else:
        if body or draw(st.booleans()):
            insert(b"content-length", b"%d" % len(body))
        wire_body = body
    lines = [b"%s %s HTTP/%s" % (method, target, version)]
    lines += [name + b":" + draw(ows) + value + draw(after) for name, value in fields]
    head = b"".join(line + draw(line_endings) for line in lines) + draw(line_endings)
    return head + wire_body, (method, target, version, [(n.lower(), v) for n, v in fields], body)


@st.composite
def pipelines(draw: st.DrawFn, for_llhttp: bool = False) -> tuple[bytes, list[Parsed]]:
    count = draw(st.integers(1, 4))
    made = [draw(requests(last=i == count - 1, for_llhttp=for_llhttp)) for i in range(count)]
    return b"".join(data for data, _ in made), [parsed for _, parsed in made]


@st.composite
def splits(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at random points into non-empty pieces (b"" would mean end of stream)."""
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=6))))
    edges = [0] + [cut for cut in cuts if cut < len(data)] + [len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:]) if a < b]


# The three parsers, each reduced to (requests, error).

def ours(pieces: list[bytes]) -> tuple[list[Parsed], list[int], HTTPError | None]:
    """Our parse: the requests, where each ended in the stream, and the error that stopped it."""
    parser = RequestParser()
    got: list[Parsed] = []
    ends: list[int] = []
    fed = 0
    for piece in pieces:
        parser.feed(piece)
        fed += len(piece)
        try:
            while (request := parser.next_request()) is not None:
                got.append(_parsed(request))
                ends.append(fed - parser.buffered)
                if _closes(request):
                    return got, ends, None
        except HTTPError as error:
            return got, ends, error
    return got, ends, None


def _parsed(request: Request) -> Parsed:
    return request.method, request.target, request.version, request.headers, request.body


def _closes(request: Request) -> bool:
    # Where h11 stops reading: after Connection: close, and after any HTTP/1.0
    # request, since h11 never keeps an HTTP/1.0 connection open (see
    # test_known_difference_http_1_0_keep_alive).
    return not request.keep_alive or request.version == b"1.0"


def with_h11(pieces: list[bytes]) -> tuple[list[Parsed], h11.RemoteProtocolError | None, bytes]:
    """h11's parse: the requests, the error that stopped it, and the bytes it had not used."""
    conn = h11.Connection(h11.SERVER)
    got: list[Parsed] = []
    current: list = []
    try:
        for piece in pieces:
            conn.receive_data(piece)
            while (ev := conn.next_event()) is not h11.NEED_DATA:
                if isinstance(ev, h11.Request):
                    current = [ev.method, ev.target, ev.http_version, list(ev.headers), bytearray()]
                elif isinstance(ev, h11.Data):
                    current[4] += ev.data
                elif isinstance(ev, h11.EndOfMessage):
                    got.append((*current[:4], bytes(current[4])))
                    conn.send(h11.Response(status_code=200, headers=[(b"Content-Length", b"0")]))
                    conn.send(h11.EndOfMessage())
                    if conn.our_state is h11.MUST_CLOSE:
                        return got, None, b""
                    conn.start_next_cycle()
                else:
                    raise AssertionError(f"unexpected h11 event {ev!r}")
    except h11.RemoteProtocolError as error:
        return got, error, conn.trailing_data[0]
    return got, None, b""


def h11_view(parsed: Parsed) -> Parsed:
    """Our parse as h11 reports it.

    h11 rewrites the values of the fields it interprets: Transfer-Encoding
    is lower-cased, a Content-Length list "3, 3" becomes "3" and a repeated
    Content-Length field is kept once.  We keep fields as sent.
    """
    method, target, version, headers, body = parsed
    view: list[tuple[bytes, bytes]] = []
    seen_length = False
    for name, value in headers:
        if name == b"transfer-encoding":
            value = value.lower()
        elif name == b"content-length":
            if seen_length:
                continue
            seen_length = True
            value = value.split(b",")[0].strip(b" \t")
        view.append((name, value))
    return method, target, version, view, body


def _normal_version(parsed: Parsed) -> Parsed:
    """h11's parse with the version as we report it: h11 keeps HTTP/1.2 as b"1.2",
    we read any 1.x after 1.0 as b"1.1" (RFC 9110 section 2.5)."""
    method, target, version, headers, body = parsed
    return method, target, b"1.1" if version[:2] == b"1." and version != b"1.0" else version, headers, body


def with_httptools(data: bytes) -> list[Parsed]:
    httptools = pytest.importorskip("httptools")

    class Collect:
        def __init__(self) -> None:
            self.got: list[Parsed] = []

        def on_message_begin(self) -> None:
            self.url, self.headers, self.body, self.in_head = b"", [], b"", True

        def on_url(self, url: bytes) -> None:
            self.url += url

        def on_header(self, name: bytes, value: bytes) -> None:
            if self.in_head:  # llhttp reports trailer fields here too; we drop them
                self.headers.append((name.lower(), value.rstrip(b" \t")))

        def on_headers_complete(self) -> None:
            self.in_head = False

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            self.got.append((parser.get_method(), self.url, parser.get_http_version().encode(),
                             self.headers, self.body))

    collect = Collect()
    parser = httptools.HttpRequestParser(collect)
    parser.feed_data(data)
    return collect.got


# Valid requests: all agree.

@SETTINGS
@given(st.data())
def test_valid_requests_parse_the_same_in_h11_and_in_the_model(data: st.DataObject) -> None:
    stream, model = data.draw(pipelines())
    pieces = data.draw(splits(stream))
    got, _, error = ours(pieces)
    assert error is None
    assert got == model
    theirs, their_error, _ = with_h11(pieces)
    assert their_error is None
    assert [h11_view(parsed) for parsed in got] == theirs
    event(f"{len(pieces)} pieces" if len(pieces) < 3 else "3+ pieces")


@SETTINGS
@given(pipelines(for_llhttp=True))
def test_valid_requests_parse_the_same_in_httptools(made: tuple[bytes, list[Parsed]]) -> None:
    stream, model = made
    assert ours([stream])[0] == model
    assert with_httptools(stream) == model


# Mutated requests: whenever h11 refuses, we refuse -- or it is a known leniency.

INTERESTING = [b" ", b"\t", b"\r", b"\n", b"\r\n", b"\x00", b":", b",", b";", b"=", b"\"", b"\x7f", b"\x80",
               b"0", b"9", b"a", b"Transfer-Encoding: chunked\r\n", b"Transfer-Encoding: gzip\r\n",
               b"Content-Length: 1\r\n", b"Content-Length: 0\r\n", b"Host: x\r\n", b"Connection: close\r\n",
               b"HTTP/2.0", b"HTTP/1.0", b"\r\n\r\n", b"chunked", b", ", b" ;", b"GET / HTTP/1.1\r\n"]


insertions = st.one_of(st.sampled_from(INTERESTING), st.binary(min_size=1, max_size=2))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid pipeline with one to three bytes or snippets inserted, deleted, replaced or repeated."""
    stream, _ = draw(pipelines())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(stream)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "repeat"]))
        if kind == "insert":
            stream = stream[:at] + draw(insertions) + stream[at:]
        elif kind == "delete":
            stream = stream[:at] + stream[at + draw(st.integers(1, 4)):]
        elif kind == "replace":
            stream = stream[:at] + draw(st.sampled_from(INTERESTING)) + stream[at + 1:]
        else:
            stream = stream[:at] + stream[at:at + draw(st.integers(1, 30))] * 2 + stream[at + 30:]
    return stream


# Where we accept what h11 refuses, each for a reason the RFC gives.  Each
# entry: h11's complaint, and a test on the bytes of the message it refused
# (from its first byte, or from what h11 had not yet used).
KNOWN_LENIENCIES: dict[str, tuple[str, Callable[[bytes], bool]]] = {
    # RFC 9112 section 2.2: a server SHOULD ignore at least one empty line
    # (CRLF) received before the request line.  h11 refuses any.
    "empty line before the request line": (
        r"no request line received|illegal request line",
        lambda message: message[:1] in (b"\r", b"\n")),
    # RFC 9110 section 5.6.1: a recipient MUST parse and ignore a reasonable
    # number of empty list elements: "chunked," and ", chunked" mean chunked.
    # h11 wants exactly one field, exactly "chunked".
    "empty list elements in Transfer-Encoding": (
        r"Only Transfer-Encoding: chunked is supported|multiple Transfer-Encoding headers",
        lambda message: _has_empty_coding_elements(message)),
    # RFC 9112 section 7.1.1: chunk-ext = *( BWS ";" ... ): white space may
    # come before the semicolon.  h11 allows it only at the end of the line.
    "white space before a chunk extension": (
        r"illegal chunk header",
        lambda message: re.search(rb"\r?\n[0-9A-Fa-f]+[ \t]+;", message) is not None),
    # RFC 9110 section 6.5.1: trailer fields cannot change the framing, and a
    # recipient MAY discard them; we check their syntax only.  h11 applies
    # its Content-Length and Transfer-Encoding rules to them.
    "framing fields in the trailer section": (
        r"Content-Length|Transfer-Encoding",
        lambda message: re.search(rb"\r\n0+(?:[ \t;][^\r\n]*)?\r\n(?:[^\r\n]+\r?\n)*?"
                                  rb"(?:content-length|transfer-encoding):",
                                  message, re.IGNORECASE) is not None),
}


def _has_empty_coding_elements(message: bytes) -> bool:
    """Whether the head's Transfer-Encoding fields say "chunked" only with empty elements around it."""
    head = re.split(rb"\n\r?\n", message, maxsplit=1)[0]
    values = [m.group(1).strip(b" \t").lower()
              for m in re.finditer(rb"\ntransfer-encoding:([^\r\n]*)", head, re.IGNORECASE)]
    elements = [item.strip(b" \t") for item in b",".join(values).split(b",")]
    return values != [b"chunked"] and [item for item in elements if item] == [b"chunked"]


def known_leniency(error: h11.RemoteProtocolError, message: bytes, unused: bytes) -> str | None:
    for name, (complaint, shape) in KNOWN_LENIENCIES.items():
        if re.search(complaint, str(error)) and (shape(message) or shape(unused)):
            return name
    return None


def compare_with_h11(pieces: list[bytes]) -> str:
    """Parse ``pieces`` with both; assert they agree as far as they should; say how.

    Returns "h11 accepts", "h11 accepts, we refuse", "both refuse" or
    "known leniency: NAME".  Fails if both read a message differently, if
    one finds a message's end where the other does not, or if h11 refuses a
    message that we accept (or still wait on) for no known reason.
    """
    stream = b"".join(pieces)
    got, ends, error = ours(pieces)
    theirs, their_error, unused = with_h11(pieces)
    both = min(len(got), len(theirs))
    assert [h11_view(parsed) for parsed in got[:both]] == [_normal_version(p) for p in theirs[:both]]
    if their_error is None:
        # h11 read every message it could; so must we, unless we refused one.
        assert len(got) == len(theirs) if error is None else len(got) <= len(theirs)
        return "h11 accepts" + (", we refuse" if error is not None else "")
    k = len(theirs)  # h11 refused message number k (counting from 0)
    if error is not None and len(got) <= k:
        return "both refuse"
    start = ends[k - 1] if k else 0
    message = stream[start:ends[k]] if len(got) > k else stream[start:]
    leniency = known_leniency(their_error, message, unused)
    assert leniency is not None, (
        f"h11 refused message {k} ({their_error}) but we "
        + (f"accepted it: {got[k]}" if len(got) > k else "are still waiting for more")
        + f"\nmessage: {message!r}")
    return f"known leniency: {leniency}"


@SETTINGS
@given(st.data())
def test_whenever_h11_refuses_we_refuse_too(data: st.DataObject) -> None:
    stream = data.draw(mutated())
    event(compare_with_h11(data.draw(splits(stream))))


# Each known difference, asserted on its own.

def we_accept(data: bytes) -> list[Parsed]:
    got, _, error = ours([data])
    assert error is None
    return got


CHUNKED = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
# Each known leniency, shown: the stream, and the body of the last request we read from it.
LENIENT = {
    "empty line before the request line": [
        (b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", b""),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", b""),
        # Cut after the CR of an empty line: h11 refuses at once, we wait for the LF.
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\r", b""),
    ],
    "empty list elements in Transfer-Encoding": [
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n1\r\nx\r\n0\r\n\r\n", b"x"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked, ,\r\n\r\n1\r\ny\r\n0\r\n\r\n", b"y"),
        (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding:\r\n\r\n"
         b"0\r\n\r\n", b""),
    ],
    "white space before a chunk extension": [
        (CHUNKED + b"1 ;ext\r\nx\r\n0\t;a=b\r\n\r\n", b"x"),
    ],
    "framing fields in the trailer section": [
        (CHUNKED + b"1\r\nx\r\n0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", b"x"),
        (CHUNKED + b"1\r\nz\r\n0\r\nTransfer-Encoding: gzip\r\n\r\n", b"z"),
    ],
}


def test_every_known_leniency_is_shown() -> None:
    assert LENIENT.keys() == KNOWN_LENIENCIES.keys()


@pytest.mark.parametrize(("name", "data", "body"),
                         [(name, data, body) for name, cases in LENIENT.items() for data, body in cases])
def test_known_leniency(name: str, data: bytes, body: bytes) -> None:
    assert compare_with_h11([data]) == f"known leniency: {name}"
    assert we_accept(data)[-1][4] == body


def test_known_difference_http_1_0_keep_alive() -> None:
    # Not a parse, but what follows it: h11 never keeps an HTTP/1.0
    # connection open; we honour Connection: keep-alive (RFC 9112 section
    # 9.3 and appendix C.2.2), which is what ApacheBench's -k relies on.
    data = b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2
    assert len(with_h11([data])[0]) == 1
    parser = RequestParser()
    parser.feed(data)
    assert parser.next_request().keep_alive and parser.next_request().keep_alive


def test_known_difference_h11_rewrites_framing_values_and_versions() -> None:
    data = (b"POST / HTTP/1.2\r\nHost: a\r\nContent-Length: 1, 1\r\nContent-Length: 1\r\n\r\nx"
            b"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ChUnKeD\r\n\r\n0\r\n\r\n")
    got = we_accept(data)
    assert got == [(b"POST", b"/", b"1.1", [(b"host", b"a"), (b"content-length", b"1, 1"),
                                            (b"content-length", b"1")], b"x"),
                   (b"PUT", b"/", b"1.1", [(b"host", b"a"), (b"transfer-encoding", b"ChUnKeD")], b"")]
    theirs = with_h11([data])[0]
    assert [h11_view(parsed) for parsed in got] == [_normal_version(parsed) for parsed in theirs]
    assert theirs[0][2] == b"1.2" and theirs[0][3][1] == (b"content-length", b"1")


# Where we refuse what h11 accepts, as the RFC allows.
STRICTER = {
    # RFC 9112 section 6.3: MAY reject both, and ought to (request smuggling).
    "Transfer-Encoding with Content-Length": b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                                              b"Content-Length: 1\r\n\r\n0\r\n\r\n",
    # RFC 9112 section 6.1: Transfer-Encoding in HTTP/1.0 is faulty framing.
    "Transfer-Encoding in HTTP/1.0": b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    # RFC 9112 section 5.2: a server MAY reject obs-fold with 400; h11 unfolds it.
    "obs-fold": b"GET / HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n",
    # RFC 9110 section 5.5: controls other than HTAB are not field-vchars.
    "control character in a value": b"GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
    "DEL in a value": b"GET / HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n\r\n",
    # RFC 9110 section 2.5 and 6.2: we answer 505 to any major version but 1.
    "HTTP/2.0 request line": b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    "HTTP/0.9 request line": b"GET / HTTP/0.9\r\n\r\n",
    # RFC 9112 section 3.2: an HTTP/1.x request (x >= 1) without Host; h11
    # checks only for exactly 1.1.
    "HTTP/1.2 without Host": b"GET / HTTP/1.2\r\n\r\n",
    # RFC 9112 section 7.1.1: chunk-ext-name is a token; h11 takes any ";.*".
    "chunk extension without a name": b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      b"1;\r\nx\r\n0\r\n\r\n",
    # 64 bits of chunk size is plenty; h11 allows 20 hex digits.
    "17-digit chunk size": b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                           b"00000000000000001\r\nx\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("data", STRICTER.values(), ids=STRICTER.keys())
def test_stricter_than_h11(data: bytes) -> None:
    assert len(with_h11([data])[0]) == 1
    assert compare_with_h11([data]) == "h11 accepts, we refuse"


def test_the_first_byte_that_cannot_start_a_request_is_refused_at_once() -> None:
    # h11 refuses a first byte below 0x21 at once and waits on others; we
    # refuse any byte that cannot start a method token.
    assert with_h11([b"("])[1] is None
    assert ours([b"("])[2].status == 400
