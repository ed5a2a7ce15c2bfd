# tests/test_http_parser.py
#
# The request parser, tested with bytes alone: what it accepts and how it
# reads it, what it refuses and with which status, its limits exactly at and
# one over each bound, and that the way the input is split into feeds never
# changes the outcome.

from __future__ import annotations

import pytest

from tinyloop.http import HTTPError, Limits, Request, RequestParser

HOST = b"Host: example.org\r\n"


def outcome(chunks: list[bytes], limits: Limits | None = None) -> tuple[list[Request], int | None]:
    """Feed ``chunks`` one by one, collecting requests after each feed.

    Returns the requests in order and the status of the error that stopped
    the parser, or None if it never refused.
    """
    parser = RequestParser(limits)
    requests: list[Request] = []
    for chunk in chunks:
        parser.feed(chunk)
        try:
            while (request := parser.next_request()) is not None:
                requests.append(request)
        except HTTPError as error:
            return requests, error.status
    return requests, None


def parse(data: bytes, limits: Limits | None = None) -> Request:
    """The one complete request in ``data``."""
    requests, status = outcome([data], limits)
    assert status is None, f"refused with {status}"
    assert len(requests) == 1
    return requests[0]


def refusal(data: bytes, limits: Limits | None = None) -> int:
    """The status the parser refuses ``data`` with (fails if it does not)."""
    requests, status = outcome([data], limits)
    assert status is not None, f"accepted {requests}"
    return status


# What is read, and how.

def test_a_simple_get() -> None:
    request = parse(b"GET /index.html?q=1 HTTP/1.1\r\n" + HOST + b"Accept: */*\r\n\r\n")
    assert request == Request(b"GET", b"/index.html?q=1", b"1.1",
                              [(b"host", b"example.org"), (b"accept", b"*/*")],
                              body=b"", keep_alive=True, expects_continue=False)
    assert request.header(b"accept") == b"*/*"
    assert request.header(b"cookie") is None


def test_header_names_are_lower_cased_and_values_stripped_of_white_space_around_them() -> None:
    request = parse(b"GET / HTTP/1.1\r\nHOST: a\r\nX-Thing:  \t two  words\tand tab \t\r\n"
                    b"Empty:\r\nEmpty-Too: \t \r\nNo-Space:x\r\n\r\n")
    assert request.headers == [(b"host", b"a"), (b"x-thing", b"two  words\tand tab"),
                               (b"empty", b""), (b"empty-too", b""), (b"no-space", b"x")]


def test_repeated_headers_are_kept_in_order() -> None:
    request = parse(b"GET / HTTP/1.1\r\n" + HOST + b"Cookie: a=1\r\nX: y\r\nCookie: b=2\r\n\r\n")
    assert [value for name, value in request.headers if name == b"cookie"] == [b"a=1", b"b=2"]
    assert request.header(b"cookie") == b"a=1"


def test_obs_text_is_allowed_in_values() -> None:
    # RFC 9110 section 5.5: obs-text (0x80-0xFF) may appear in a field value.
    request = parse(b"GET / HTTP/1.1\r\n" + HOST + b"X: caf\xc3\xa9\xff\r\n\r\n")
    assert request.header(b"x") == b"caf\xc3\xa9\xff"


@pytest.mark.parametrize("target", [b"/", b"*", b"http://example.org/a?b#c", b"example.org:443",
                                    b"/%20~!$&'()*+,;=:@[]"])
def test_every_request_target_form_is_read_as_sent(target: bytes) -> None:
    assert parse(b"OPTIONS " + target + b" HTTP/1.1\r\n" + HOST + b"\r\n").target == target


@pytest.mark.parametrize("method", [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"PATCH",
                                    b"get", b"M-SEARCH", b"X!#$%&'*+.^_`|~9"])
def test_methods_are_tokens_read_as_sent(method: bytes) -> None:
    assert parse(method + b" / HTTP/1.1\r\n" + HOST + b"\r\n").method == method


@pytest.mark.parametrize(("sent", "read"), [(b"1.0", b"1.0"), (b"1.1", b"1.1"), (b"1.2", b"1.1"),
                                            (b"1.9", b"1.1")])
def test_versions(sent: bytes, read: bytes) -> None:
    # RFC 9110 section 2.5: a later minor version is read as the highest we know.
    assert parse(b"GET / HTTP/" + sent + b"\r\n" + HOST + b"\r\n").version == read


def test_bare_lf_line_endings_in_the_head() -> None:
    # RFC 9112 section 2.2: a recipient MAY take a lone LF as a line ending.
    for data in [b"GET / HTTP/1.1\nHost: a\nX: y\n\n", b"GET / HTTP/1.1\r\nHost: a\nX: y\r\n\n",
                 b"GET / HTTP/1.1\nHost: a\r\nX: y\n\r\n"]:
        assert parse(data).headers == [(b"host", b"a"), (b"x", b"y")]


def test_empty_lines_before_the_request_line_are_ignored() -> None:
    # RFC 9112 section 2.2: SHOULD ignore at least one (h11 refuses them).
    requests, status = outcome([b"\r\n\n\r\nGET / HTTP/1.1\r\n" + HOST + b"\r\n"
                                b"\r\nGET /2 HTTP/1.1\r\n" + HOST + b"\r\n"])
    assert status is None
    assert [r.target for r in requests] == [b"/", b"/2"]


def test_http_1_0_needs_no_host() -> None:
    assert parse(b"GET / HTTP/1.0\r\n\r\n").headers == []


# Keep-alive: RFC 9112 section 9.3.

@pytest.mark.parametrize(("version", "connection", "keep_alive"), [
    (b"1.1", None, True),
    (b"1.1", b"keep-alive", True),
    (b"1.1", b"close", False),
    (b"1.1", b"Close", False),
    (b"1.1", b"upgrade, close", False),
    (b"1.0", None, False),
    (b"1.0", b"keep-alive", True),
    (b"1.0", b"Keep-Alive", True),  # what ApacheBench's -k sends
    (b"1.0", b"keep-alive, close", False),
    (b"1.0", b"close", False),
])
def test_keep_alive(version: bytes, connection: bytes | None, keep_alive: bool) -> None:
    field = b"" if connection is None else b"Connection: " + connection + b"\r\n"
    assert parse(b"GET / HTTP/" + version + b"\r\n" + HOST + field + b"\r\n").keep_alive is keep_alive


def test_connection_tokens_from_several_fields_count() -> None:
    request = parse(b"GET / HTTP/1.1\r\n" + HOST + b"Connection: foo\r\nConnection: close\r\n\r\n")
    assert not request.keep_alive


# Bodies: RFC 9112 section 6 (Content-Length) and section 7 (chunked).

def test_content_length_body() -> None:
    request = parse(b"POST /echo HTTP/1.1\r\n" + HOST + b"Content-Length: 11\r\n\r\nhello world")
    assert request.body == b"hello world"


def test_content_length_zero_and_absent_mean_no_body() -> None:
    assert parse(b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 0\r\n\r\n").body == b""
    assert parse(b"POST / HTTP/1.1\r\n" + HOST + b"\r\n").body == b""


def test_identical_content_lengths_are_read_as_one() -> None:
    # RFC 9110 section 8.6.
    assert parse(b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 3, 3\r\n\r\nabc").body == b"abc"
    repeated = b"Content-Length: 3\r\nContent-Length: 3\r\n"
    assert parse(b"POST / HTTP/1.1\r\n" + HOST + repeated + b"\r\nabc").body == b"abc"


def test_chunked_body() -> None:
    request = parse(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
                    b"5\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\n\r\n")
    assert request.body == b"hello 0123456789"
    assert request.header(b"transfer-encoding") == b"chunked"


def test_chunk_sizes_in_either_case_and_with_leading_zeros() -> None:
    request = parse(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: Chunked\r\n\r\n"
                    b"0000000a\r\n0123456789\r\nB\r\nabcdefghijk\r\n000\r\n\r\n")
    assert request.body == b"0123456789abcdefghijk"


def test_chunk_extensions_are_parsed_and_ignored() -> None:
    request = parse(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
                    b"5;name\r\nhello\r\n"
                    b"1 ; a = b ;c=\"quoted; \\\"string\\\"\"\t\r\n!\r\n"
                    b"0;last=1\r\n\r\n")
    assert request.body == b"hello!"


def test_trailer_fields_are_checked_and_dropped() -> None:
    request = parse(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
                    b"3\r\nabc\r\n0\r\nChecksum: 1234\r\nX-Other: y\n\r\n")
    assert request.body == b"abc"
    assert request.header(b"checksum") is None


def test_an_empty_chunked_body() -> None:
    assert parse(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").body == b""


def test_empty_list_elements_are_ignored_in_transfer_encoding() -> None:
    # RFC 9110 section 5.6.1: recipients MUST ignore empty list elements (h11 refuses them).
    request = parse(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: , chunked,\r\n\r\n"
                    b"1\r\nx\r\n0\r\n\r\n")
    assert request.body == b"x"


# Pipelining: RFC 9112 section 9.3.2.

def test_pipelined_requests_come_out_one_per_call_in_order() -> None:
    parser = RequestParser()
    parser.feed(b"".join(b"POST /%d HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s"
                         % (i, len(b"x" * i), b"x" * i) for i in range(20))
                + b"GET /last HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                + b"GET /partial HTTP/1.1\r\n")
    for i in range(20):
        request = parser.next_request()
        assert request is not None and (request.target, request.body) == (b"/%d" % i, b"x" * i)
    assert parser.next_request().target == b"/last"
    assert parser.next_request() is None
    assert parser.buffered == len(b"GET /partial HTTP/1.1\r\n")


# Refusals.

MALFORMED = {
    "no version": b"GET /\r\n\r\n",
    "lower-case HTTP": b"GET / http/1.1\r\n" + HOST + b"\r\n",
    "two spaces": b"GET  / HTTP/1.1\r\n" + HOST + b"\r\n",
    "tab separator": b"GET\t/ HTTP/1.1\r\n" + HOST + b"\r\n",
    "space in target": b"GET /a b HTTP/1.1\r\n" + HOST + b"\r\n",
    "obs-text in target": b"GET /caf\xc3\xa9 HTTP/1.1\r\n" + HOST + b"\r\n",
    "control in target": b"GET /\x01 HTTP/1.1\r\n" + HOST + b"\r\n",
    "trailing space": b"GET / HTTP/1.1 \r\n" + HOST + b"\r\n",
    "two-digit minor": b"GET / HTTP/1.10\r\n" + HOST + b"\r\n",
    "method not a token": b"G(ET / HTTP/1.1\r\n" + HOST + b"\r\n",
    "leading space": b" GET / HTTP/1.1\r\n" + HOST + b"\r\n",
    "TLS handshake": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "bare CR ending": b"GET / HTTP/1.1\r" + HOST + b"\r\n",
    "CR CR LF": b"GET / HTTP/1.1\r\r\n" + HOST + b"\r\n",
    "no colon": b"GET / HTTP/1.1\r\n" + HOST + b"NoColon\r\n\r\n",
    "space before colon": b"GET / HTTP/1.1\r\n" + HOST + b"X : y\r\n\r\n",
    "empty name": b"GET / HTTP/1.1\r\n" + HOST + b": y\r\n\r\n",
    "obs-fold": b"GET / HTTP/1.1\r\n" + HOST + b"X: a\r\n  folded\r\n\r\n",
    "obs-fold first": b"GET / HTTP/1.1\r\n folded\r\n" + HOST + b"\r\n",
    "NUL in value": b"GET / HTTP/1.1\r\n" + HOST + b"X: a\x00b\r\n\r\n",
    "CR in value": b"GET / HTTP/1.1\r\n" + HOST + b"X: a\rb\r\n\r\n",
    "control in value": b"GET / HTTP/1.1\r\n" + HOST + b"X: a\x01b\r\n\r\n",
    "DEL in value": b"GET / HTTP/1.1\r\n" + HOST + b"X: a\x7fb\r\n\r\n",
    "non-token name": b"GET / HTTP/1.1\r\n" + HOST + b"X(y): z\r\n\r\n",
    "no Host in 1.1": b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n",
    "two Hosts": b"GET / HTTP/1.1\r\n" + HOST + HOST + b"\r\n",
    "two Hosts in 1.0": b"GET / HTTP/1.0\r\n" + HOST + HOST + b"\r\n",
    "TE and CL": b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    "CL and TE": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
    "TE in 1.0": b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "TE not ending in chunked": b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked, gzip\r\n\r\n",
    "TE only gzip": b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: gzip\r\n\r\n",
    "TE empty": b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding:\r\n\r\n",
    "chunked twice": b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked, chunked\r\n\r\n",
    "chunked twice in two fields": b"POST / HTTP/1.1\r\n" + HOST
    + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    "CL not a number": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: five\r\n\r\n",
    "CL signed": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: +5\r\n\r\nhello",
    "CL negative": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: -1\r\n\r\n",
    "CL hex": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 0x5\r\n\r\n",
    "CL empty": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length:\r\n\r\n",
    "CL empty element": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 5,\r\n\r\nhello",
    "CL conflicting list": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 5, 6\r\n\r\nhello!",
    "CL conflicting fields": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\nContent-Length: 6\r\n"
                             b"\r\n",
    "CL non-ASCII digit": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: \xd9\xa5\r\n\r\n",
}

CHUNKED = b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
MALFORMED_CHUNKED = {
    "size not hex": b"g\r\nhello\r\n0\r\n\r\n",
    "size 0x": b"0x5\r\nhello\r\n0\r\n\r\n",
    "size empty": b"\r\nhello\r\n0\r\n\r\n",
    "size negative": b"-5\r\nhello\r\n0\r\n\r\n",
    "size of 17 digits": b"00000000000000005\r\nhello\r\n0\r\n\r\n",
    "space before size": b" 5\r\nhello\r\n0\r\n\r\n",
    "bare LF after size": b"5\nhello\r\n0\r\n\r\n",
    "data too long": b"5\r\nhello!\r\n0\r\n\r\n",
    "bare LF after data": b"5\r\nhello\n0\r\n\r\n",
    "no CRLF after data": b"5\r\nhelloX\r\n0\r\n\r\n",
    "extension without name": b"5;\r\nhello\r\n0\r\n\r\n",
    "extension name not a token": b"5;a(b)\r\nhello\r\n0\r\n\r\n",
    "extension value empty": b"5;a=\r\nhello\r\n0\r\n\r\n",
    "extension quote unclosed": b"5;a=\"b\r\nhello\r\n0\r\n\r\n",
    "extension control": b"5;a=b\x01\r\nhello\r\n0\r\n\r\n",
    "extension without ;": b"5 a=b\r\nhello\r\n0\r\n\r\n",
    "malformed trailer": b"5\r\nhello\r\n0\r\nno colon\r\n\r\n",
    "obs-fold trailer": b"5\r\nhello\r\n0\r\nA: b\r\n c\r\n\r\n",
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_requests_are_refused_with_400(data: bytes) -> None:
    assert refusal(data) == 400


@pytest.mark.parametrize("data", MALFORMED_CHUNKED.values(), ids=MALFORMED_CHUNKED.keys())
def test_malformed_chunked_bodies_are_refused_with_400(data: bytes) -> None:
    assert refusal(CHUNKED + data) == 400


@pytest.mark.parametrize("version", [b"2.0", b"3.0", b"3.1", b"0.9", b"9.9"])
def test_versions_other_than_1_x_get_505(version: bytes) -> None:
    assert refusal(b"GET / HTTP/" + version + b"\r\n" + HOST + b"\r\n") == 505


@pytest.mark.parametrize("codings", [b"gzip, chunked", b"deflate,chunked", b"x-custom , chunked"])
def test_unknown_transfer_codings_before_chunked_get_501(codings: bytes) -> None:
    # RFC 9112 section 6.1: SHOULD answer 501 to a coding it does not understand,
    # when chunked is last (else the framing itself is broken: 400, above).
    assert refusal(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: " + codings + b"\r\n\r\n") == 501
    assert refusal(b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: gzip\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n") == 501


def test_a_tls_handshake_is_refused_from_its_first_byte() -> None:
    assert outcome([b"\x16"]) == ([], 400)


def test_after_an_error_the_parser_is_spent() -> None:
    parser = RequestParser()
    parser.feed(b"GET / HTTP/1.1\r\n" + HOST + b"\r\nBAD\r\n\r\nGET / HTTP/1.1\r\n" + HOST + b"\r\n")
    assert parser.next_request() is not None
    with pytest.raises(HTTPError) as first:
        parser.next_request()
    parser.feed(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n")
    with pytest.raises(HTTPError) as second:
        parser.next_request()
    assert first.value is second.value and first.value.status == 400


# Limits: exactly at the bound is accepted, one over is refused.

SMALL = Limits(max_request_line=64, max_header_bytes=256, max_headers=5, max_body=100,
               max_chunk_line=32)


def request_line_of(length: int) -> bytes:
    line = b"GET / HTTP/1.1"
    return b"GET /" + b"a" * (length - len(line)) + b" HTTP/1.1"


def head_of(size: int, line_ending: bytes = b"\r\n") -> bytes:
    """A whole head of exactly ``size`` bytes, with one padded field."""
    start = b"GET / HTTP/1.1" + line_ending + b"Host: a" + line_ending + b"X: "
    end = line_ending + line_ending
    head = start + b"v" * (size - len(start) - len(end)) + end
    assert len(head) == size
    return head


@pytest.mark.parametrize("incremental", [False, True], ids=["whole", "byte-by-byte"])
def test_request_line_limit(incremental: bool) -> None:
    def run(data: bytes) -> tuple[list[Request], int | None]:
        return outcome([data[i:i + 1] for i in range(len(data))] if incremental else [data], SMALL)

    for ending in [b"\r\n", b"\n"]:
        at = request_line_of(64) + ending + b"Host: a\r\n\r\n"
        assert len(run(at)[0]) == 1
        over = request_line_of(65) + ending + b"Host: a\r\n\r\n"
        assert run(over) == ([], 414)
    # Refused before its end arrives, as soon as it is sure to be too long.
    assert outcome([request_line_of(64) + b"\r"], SMALL) == ([], None)
    assert outcome([request_line_of(65)], SMALL) == ([], 414)


@pytest.mark.parametrize("ending", [b"\r\n", b"\n"], ids=["CRLF", "LF"])
def test_head_size_limit(ending: bytes) -> None:
    assert len(outcome([head_of(256, ending)], SMALL)[0]) == 1
    assert outcome([head_of(257, ending)], SMALL) == ([], 431)
    data = head_of(257, ending)
    assert outcome([data[i:i + 1] for i in range(len(data))], SMALL) == ([], 431)
    # An unfinished head already larger than the limit is refused at once.
    assert outcome([data[:-len(ending)] + b"v" * 10], SMALL) == ([], 431)


def test_header_count_limit() -> None:
    fields = b"".join(b"X%d: y\r\n" % i for i in range(4))
    assert len(outcome([b"GET / HTTP/1.1\r\n" + HOST + fields + b"\r\n"], SMALL)[0]) == 1
    assert outcome([b"GET / HTTP/1.1\r\n" + HOST + fields + b"X: y\r\n\r\n"], SMALL) == ([], 431)


def test_content_length_limit() -> None:
    head = b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: %d\r\n\r\n"
    assert parse(head % 100 + b"x" * 100, SMALL).body == b"x" * 100
    # Refused from the head alone, before any of the body is buffered.
    assert outcome([head % 101], SMALL) == ([], 413)
    assert refusal(head % (2**64), SMALL) == 413
    assert refusal(head.replace(b"%d", b"9" * 5000)) == 413  # too many digits for int(): still 413


def test_chunked_body_limit() -> None:
    at = CHUNKED + b"32\r\n" + b"x" * 50 + b"\r\n32\r\n" + b"y" * 50 + b"\r\n0\r\n\r\n"
    assert parse(at, SMALL).body == b"x" * 50 + b"y" * 50
    # Refused from the chunk size line alone, before its data arrives.
    assert outcome([CHUNKED + b"32\r\n" + b"x" * 50 + b"\r\n33\r\n"], SMALL) == ([], 413)
    assert outcome([CHUNKED + b"ffffffffffffffff\r\n"], SMALL) == ([], 413)


def test_chunk_line_limit() -> None:
    extension = b";" + b"e" * 30  # a line of 32 bytes
    assert parse(CHUNKED + b"1" + extension + b"\r\nx\r\n0\r\n\r\n", SMALL).body == b"x"
    assert refusal(CHUNKED + b"1" + extension + b"e\r\nx\r\n0\r\n\r\n", SMALL) == 400
    assert outcome([CHUNKED + b"1" + extension + b"\r"], SMALL) == ([], None)
    assert outcome([CHUNKED + b"1" + extension + b"ee"], SMALL) == ([], 400)


def test_trailer_section_limit() -> None:
    def trailers(size: int) -> bytes:
        field = b"T: " + b"v" * (size - len(b"T: \r\n\r\n")) + b"\r\n\r\n"
        assert len(field) == size
        return CHUNKED + b"1\r\nx\r\n0\r\n" + field

    assert parse(trailers(256), SMALL).body == b"x"
    assert refusal(trailers(257), SMALL) == 431
    assert outcome([trailers(258)[:-1]], SMALL) == ([], 431)  # unfinished, already too long


def test_trailer_count_limit() -> None:
    fields = b"".join(b"T%d: v\r\n" % i for i in range(5))
    assert parse(CHUNKED + b"0\r\n" + fields + b"\r\n", SMALL).body == b""
    assert refusal(CHUNKED + b"0\r\n" + fields + b"T: v\r\n\r\n", SMALL) == 431


# End of stream, and the interim state a server sees.

def test_end_of_stream_in_the_middle_of_a_request_yields_nothing() -> None:
    for partial in [b"GET / HT", b"GET / HTTP/1.1\r\n" + HOST,
                    b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nabc",
                    CHUNKED + b"5\r\nhello\r\n", b"\r\n"]:
        parser = RequestParser()
        parser.feed(partial)
        assert parser.next_request() is None
        parser.feed(b"")
        assert parser.eof
        assert parser.next_request() is None


def test_head_pending_while_the_body_arrives() -> None:
    parser = RequestParser()
    parser.feed(b"POST / HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert parser.next_request() is None
    pending = parser.head_pending
    assert pending is not None and pending.expects_continue and pending.body == b""
    parser.feed(b"ok")
    request = parser.next_request()
    assert request is pending and request.body == b"ok" and not request.expects_continue
    assert parser.head_pending is None


def test_expect_100_continue_is_ignored_in_http_1_0() -> None:
    # RFC 9110 section 10.1.1.
    parser = RequestParser()
    parser.feed(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert parser.next_request() is None
    assert not parser.head_pending.expects_continue


# The split invariance: however the bytes are cut into feeds, same outcome.

STREAMS = {
    "ab": b"GET / HTTP/1.0\r\nHost: 127.0.0.1:8000\r\nUser-Agent: ApacheBench/2.3\r\nAccept: */*\r\n\r\n",
    "ab -k": b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: h\r\nUser-Agent: ApacheBench/2.3\r\n"
             b"Accept: */*\r\n\r\n",
    "pipelined": b"\r\nGET /1 HTTP/1.1\nHost: a\n\nPOST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n"
                 b"body\r\nPUT /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, , chunked\r\n\r\n",
    "chunked": CHUNKED + b"3;x=\"a;b\"\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: 1\r\n\r\n"
               + b"GET / HTTP/1.1\r\n" + HOST + b"\r\n",
    "chunked, LF in trailers": CHUNKED + b"1\r\na\r\n0\r\nT: 1\nU: 2\n\n",
    "error after a request": b"GET / HTTP/1.1\r\n" + HOST + b"\r\nGET / HTTP/1.1\r\nX : y\r\n\r\n",
    "bad chunk CRLF": CHUNKED + b"2\r\nab\n\r\n0\r\n\r\n",
    "version": b"GET / HTTP/2.0\r\n" + HOST + b"\r\n",
    "TLS": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
    "stray CR": b"\rGET / HTTP/1.1\r\n" + HOST + b"\r\n",
    "incomplete": b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 10\r\n\r\nabc",
}
LIMITED = {
    "long line": request_line_of(65) + b"\r\n" + HOST + b"\r\n",
    "long line, malformed": request_line_of(65) + b"X\r\n" + HOST + b"\r\n",
    "long head": head_of(257),
    "long head, bad line": b"GET / HTTP/1.1 x" + head_of(257)[16:],
    "long head and line": request_line_of(70) + head_of(300)[14:],
    "at the limits": request_line_of(64) + b"\r\nHost: a\r\n\r\n" + head_of(256) + CHUNKED
    + b"32\r\n" + b"x" * 50 + b"\r\n32\r\n" + b"y" * 50 + b"\r\n0\r\n\r\n",
    "big body": CHUNKED + b"32\r\n" + b"x" * 50 + b"\r\n33\r\n" + b"y" * 51 + b"\r\n0\r\n\r\n",
    "long chunk line": CHUNKED + b"1;" + b"e" * 40 + b"\r\nx\r\n0\r\n\r\n",
    "long trailers": CHUNKED + b"0\r\nT: " + b"v" * 300 + b"\r\n\r\n",
}
SPLIT_CASES = [(data, None) for data in STREAMS.values()] + [(data, SMALL) for data in LIMITED.values()]


@pytest.mark.parametrize(("data", "limits"), SPLIT_CASES, ids=list(STREAMS) + list(LIMITED))
def test_every_split_gives_the_same_outcome(data: bytes, limits: Limits | None) -> None:
    whole = outcome([data], limits)
    assert outcome([data[i:i + 1] for i in range(len(data))], limits) == whole
    for cut in range(len(data) + 1):
        assert outcome([data[:cut], data[cut:]], limits) == whole, f"split at {cut}"


def test_split_cases_cover_acceptance_and_every_refusal() -> None:
    # The table above is meant to exercise each outcome; keep it that way.
    statuses = {outcome([data], limits)[1] for data, limits in SPLIT_CASES}
    assert statuses == {None, 400, 413, 414, 431, 501, 505}
    assert sum(len(outcome([data], limits)[0]) for data, limits in SPLIT_CASES) >= 10
