# tests/test_http_connection.py
#
# HTTPConnection, the one call every stage's server makes, tested with bytes
# alone: exact response bytes, the Connection header rules for HTTP/1.0 and
# 1.1, HEAD, pipelining, errors, 100-continue, end of stream, and the small
# application every stage serves.

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyloop.http import HELLO, HTTPConnection, Limits, Response, http_date, render

HOST = b"Host: example.org\r\n"
AB = b"GET / HTTP/1.0\r\nHost: 127.0.0.1:8000\r\nUser-Agent: ApacheBench/2.3\r\nAccept: */*\r\n\r\n"
AB_KEEP_ALIVE = (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\nHost: 127.0.0.1:8000\r\n"
                 b"User-Agent: ApacheBench/2.3\r\nAccept: */*\r\n\r\n")

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\n"


def connection(**kwargs) -> HTTPConnection:
    """A connection that sends no Date header, so its output is the same on every run."""
    return HTTPConnection(clock=None, **kwargs)


def split_responses(data: bytes) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """Cut ``data`` into (status line, headers, body) triples, using Content-Length."""
    responses = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.split(b"\r\n")
        headers = {name.lower(): value for name, value in (line.split(b": ", 1) for line in lines)}
        length = int(headers.get(b"content-length", b"0"))
        if status_line.split(b" ")[1] in (b"100", b"204"):
            length = 0
        responses.append((status_line, headers, rest[:length]))
        data = rest[length:]
    return responses


# Exact bytes.

def test_get_over_http_1_1_keeps_the_connection_open() -> None:
    conn = connection()
    assert conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n") == OK_HEAD + b"\r\n" + HELLO
    assert not conn.should_close
    assert conn.requests_served == 1


def test_ab_without_keep_alive_gets_connection_close() -> None:
    # HTTP/1.0 closes by default (RFC 9112 section 9.3); the status line
    # still says HTTP/1.1, our version (RFC 9110 section 2.5).
    conn = connection()
    assert conn.receive_data(AB) == OK_HEAD + b"Connection: close\r\n\r\n" + HELLO
    assert conn.should_close


def test_ab_keep_alive_gets_connection_keep_alive() -> None:
    # What `ab -k` sends and waits for: without the header it would wait for the close.
    conn = connection()
    for _ in range(3):
        assert conn.receive_data(AB_KEEP_ALIVE) == OK_HEAD + b"Connection: keep-alive\r\n\r\n" + HELLO
        assert not conn.should_close
    assert conn.requests_served == 3


def test_http_1_1_connection_close() -> None:
    conn = connection()
    out = conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n")
    assert out == OK_HEAD + b"Connection: close\r\n\r\n" + HELLO
    assert conn.should_close
    assert conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n") == b""


@pytest.mark.parametrize(("version", "extra", "expected"), [
    (b"1.1", b"", None),
    (b"1.1", b"Connection: keep-alive\r\n", None),
    (b"1.1", b"Connection: close\r\n", b"close"),
    (b"1.0", b"", b"close"),
    (b"1.0", b"Connection: keep-alive\r\n", b"keep-alive"),
    (b"1.0", b"Connection: close\r\n", b"close"),
])
def test_connection_header_rules(version: bytes, extra: bytes, expected: bytes | None) -> None:
    conn = connection()
    [(status_line, headers, body)] = split_responses(
        conn.receive_data(b"GET / HTTP/" + version + b"\r\n" + HOST + extra + b"\r\n"))
    assert status_line == b"HTTP/1.1 200 OK"
    assert headers.get(b"connection") == expected
    assert conn.should_close is (expected == b"close")


def test_head_has_no_body_but_keeps_its_content_length() -> None:
    # RFC 9110 section 9.3.2.
    conn = connection()
    assert conn.receive_data(b"HEAD / HTTP/1.1\r\n" + HOST + b"\r\n") == OK_HEAD + b"\r\n"
    # The next response starts right after: nothing of a body was sent.
    assert conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n") == OK_HEAD + b"\r\n" + HELLO


def test_date_header() -> None:
    assert http_date(784111777) == b"Sun, 06 Nov 1994 08:49:37 GMT"  # RFC 9110's own example
    assert http_date(784111777.9) == b"Sun, 06 Nov 1994 08:49:37 GMT"
    assert http_date(0) == b"Thu, 01 Jan 1970 00:00:00 GMT"
    conn = HTTPConnection(clock=lambda: 784111777.5)
    out = conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n")
    # The default clock is the real one.
    out = HTTPConnection().receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n")
    assert re.search(rb"\r\nDate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r\n", out)


# The application: GET /, POST /echo, GET /compute?ms=N.

def test_post_echo_with_content_length_and_chunked() -> None:
    conn = connection()
    out = conn.receive_data(b"POST /echo HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello"
                            + b"POST /echo HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n"
                            b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n")
    assert [(s, h[b"content-type"], b) for s, h, b in split_responses(out)] == [
        (b"HTTP/1.1 200 OK", b"application/octet-stream", b"hello"),
        (b"HTTP/1.1 200 OK", b"application/octet-stream", b"abcde"),
    ]


@pytest.mark.parametrize(("request_line", "status", "allow"), [
    (b"GET /nowhere HTTP/1.1", 404, None),
    (b"POST / HTTP/1.1", 405, b"GET, HEAD"),
    (b"GET /echo HTTP/1.1", 405, b"POST"),
    (b"DELETE /compute?ms=0 HTTP/1.1", 405, b"GET, HEAD"),
    (b"GET http://example.org/ HTTP/1.1", 200, None),  # absolute-form, RFC 9112 section 3.2.2
    (b"GET http://example.org HTTP/1.1", 200, None),
    (b"POST HTTP://example.org/echo?x HTTP/1.1", 200, None),
    (b"GET http://example.org/compute?ms=0 HTTP/1.1", 200, None),
    (b"OPTIONS * HTTP/1.1", 404, None),
    (b"GET example.org:80 HTTP/1.1", 404, None),
])
def test_other_paths_and_methods(request_line: bytes, status: int, allow: bytes | None) -> None:
    out = connection().receive_data(request_line + b"\r\n" + HOST + b"\r\n")
    [(status_line, headers, _)] = split_responses(out)
    assert int(status_line.split(b" ")[1]) == status
    assert headers.get(b"allow") == allow


@pytest.mark.parametrize(("query", "status", "body"), [
    (b"?ms=0", 200, b"computed for 0 ms\n"),
    (b"?ms=1", 200, b"computed for 1 ms\n"),
    (b"?x=2&ms=0&ms=5000", 200, b"computed for 0 ms\n"),
    (b"", 400, None),
    (b"?ms=", 400, None),
    (b"?ms=-1", 400, None),
    (b"?ms=1.5", 400, None),
    (b"?ms=abc", 400, None),
    (b"?ms=1001", 400, None),
    (b"?ms=" + b"9" * 5000, 400, None),  # too many digits for int(): still a clean 400
])
def test_compute_validates_its_argument(query: bytes, status: int, body: bytes | None) -> None:
    conn = connection()
    [(status_line, _, got)] = split_responses(conn.receive_data(b"GET /compute" + query + b" HTTP/1.1\r\n"
                                                                + HOST + b"\r\n"))
    assert int(status_line.split(b" ")[1]) == status
    if body is not None:
        assert got == body
    assert not conn.should_close  # a 400 from the application is not a protocol error


# Pipelining.

def test_pipelined_requests_are_answered_in_order_in_one_string() -> None:
    requests = [b"GET /%d HTTP/1.1\r\n" % i + HOST + b"\r\n" for i in range(10)]
    requests[3] = b"POST /echo HTTP/1.1\r\n" + HOST + b"Content-Length: 4\r\n\r\nfour"
    requests[6] = b"GET / HTTP/1.1\r\n" + HOST + b"\r\n"
    conn = connection()
    out = conn.receive_data(b"".join(requests))
    answers = [(status_line, body) for status_line, _, body in split_responses(out)]
    assert answers == ([(b"HTTP/1.1 404 Not Found", b"Not Found\n")] * 3 + [(b"HTTP/1.1 200 OK", b"four")]
                       + [(b"HTTP/1.1 404 Not Found", b"Not Found\n")] * 2 + [(b"HTTP/1.1 200 OK", HELLO)]
                       + [(b"HTTP/1.1 404 Not Found", b"Not Found\n")] * 3)
    assert conn.requests_served == 10 and not conn.should_close


def test_nothing_is_answered_after_a_closing_response() -> None:
    conn = connection()
    out = conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n"
                            + b"GET / HTTP/1.1\r\n" + HOST + b"Connection: close\r\n\r\n"
                            + b"GET / HTTP/1.1\r\n" + HOST + b"\r\n")
    assert len(split_responses(out)) == 2
    assert conn.should_close and conn.requests_served == 2


def test_a_request_split_across_reads() -> None:
    conn = connection()
    data = b"POST /echo HTTP/1.1\r\n" + HOST + b"Content-Length: 10\r\n\r\n0123456789"
    outputs = [conn.receive_data(data[i:i + 7]) for i in range(0, len(data), 7)]
    assert all(out == b"" for out in outputs[:-1])
    assert split_responses(outputs[-1])[0][2] == b"0123456789"


# Errors: an answer, Connection: close, and nothing after.

ERRORS = {
    400: b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n",
    413: b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n",
    414: b"GET /" + b"a" * 100 + b" HTTP/1.1\r\n",
    431: b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 300 + b"\r\n\r\n",
    501: b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    505: b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
}
SMALL = Limits(max_request_line=64, max_header_bytes=256, max_body=100)


@pytest.mark.parametrize("status", ERRORS)
def test_errors_are_answered_and_close(status: int) -> None:
    conn = connection(limits=SMALL)
    out = conn.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" + ERRORS[status] + b"GET / HTTP/1.1\r\n\r\n")
    [first, (status_line, headers, body)] = split_responses(out)
    assert first[2] == HELLO
    assert status_line.startswith(b"HTTP/1.1 %d " % status)
    assert headers[b"connection"] == b"close"
    assert body.startswith(b"%d " % status) and body.endswith(b"\n")
    assert conn.should_close and conn.requests_served == 1
    assert conn.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n") == b""
    assert conn.receive_data(b"") == b""


def test_a_request_that_is_only_too_large_is_answered_before_it_ends() -> None:
    conn = connection(limits=SMALL)
    assert conn.receive_data(b"GET /" + b"a" * 70).startswith(b"HTTP/1.1 414 URI Too Long\r\n")
    assert conn.should_close


# Expect: 100-continue (RFC 9110 section 10.1.1).

def test_expect_100_continue_gets_an_interim_response_once() -> None:
    conn = connection()
    head = b"POST /echo HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 6\r\n\r\n"
    assert conn.receive_data(head) == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert conn.receive_data(b"abc") == b""
    out = conn.receive_data(b"def")
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and out.endswith(b"\r\n\r\nabcdef")
    # A second request asking the same gets its own 100.
    assert conn.receive_data(head + b"ab") == b"HTTP/1.1 100 Continue\r\n\r\n"


def test_no_100_continue_when_the_body_is_already_here_or_absent_or_in_http_1_0() -> None:
    for data in [b"POST /echo HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
                 b"GET / HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\n\r\n",
                 b"POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"]:
        assert b" 100 " not in connection().receive_data(data)


def test_no_100_continue_for_a_body_that_is_refused() -> None:
    out = connection(limits=SMALL).receive_data(
        b"POST /echo HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 1000\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413 Content Too Large\r\n")


def test_100_continue_after_earlier_pipelined_responses() -> None:
    conn = connection()
    out = conn.receive_data(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n" + b"POST /echo HTTP/1.1\r\n" + HOST
                            + b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert out == OK_HEAD + b"\r\n" + HELLO + b"HTTP/1.1 100 Continue\r\n\r\n"


# End of stream.

@pytest.mark.parametrize("before", [b"", b"GET / HTTP/1.1\r\n" + HOST + b"\r\n", b"GET / HT",
                                    b"POST /echo HTTP/1.1\r\n" + HOST + b"Content-Length: 9\r\n\r\nabc"],
                         ids=["nothing", "between requests", "in the head", "in the body"])
def test_end_of_stream_closes_without_a_response(before: bytes) -> None:
    conn = connection()
    if before:  # receive_data(b"") is the end of stream itself
        conn.receive_data(before)
        assert not conn.should_close
    assert conn.receive_data(b"") == b""
    assert conn.should_close


# Whatever the split, the same bytes come out.

@pytest.mark.parametrize("data", [
    AB_KEEP_ALIVE * 3,
    b"GET / HTTP/1.1\r\n" + HOST + b"\r\nPOST /echo HTTP/1.1\r\n" + HOST
    + b"Transfer-Encoding: chunked\r\n\r\n4\r\nwxyz\r\n0\r\n\r\nHEAD / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + HOST + b"\r\nGET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
])
def test_output_does_not_depend_on_how_input_was_split(data: bytes) -> None:
    whole = connection()
    expected = whole.receive_data(data)
    for pieces in ([data[i:i + 1] for i in range(len(data))],
                   *([data[:cut], data[cut:]] for cut in range(len(data) + 1))):
        conn = connection()
        # (An empty piece would be the end of stream: leave those out.)
        assert b"".join(conn.receive_data(piece) for piece in pieces if piece) == expected
        assert conn.should_close == whole.should_close


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.binary(max_size=40),
                          st.sampled_from([b"GET / HTTP/1.1\r\n", b"Host: a\r\n", b"\r\n", b"\n", b"0\r\n",
                                           b"Transfer-Encoding: chunked\r\n", b"Content-Length: 3\r\n",
                                           b"Expect: 100-continue\r\n", b"POST /echo HTTP/1.0\r\n"])),
                max_size=12))
def test_no_input_makes_receive_data_raise(pieces: list[bytes]) -> None:
    conn = connection(limits=SMALL)
    for piece in pieces + [b""]:
        out = conn.receive_data(piece)
        assert isinstance(out, bytes)
        for status_line, _, _ in split_responses(out):
            assert re.fullmatch(rb"HTTP/1\.1 (100|200|404|405|400|413|414|431|501|505) [A-Za-z ]+",
                                status_line)
    assert conn.should_close


# render() on its own.

def test_render_leaves_content_headers_out_of_1xx_and_204() -> None:
    assert render(Response(204, b"")) == b"HTTP/1.1 204 No Content\r\n\r\n"
    assert render(Response(103, b""), keep_alive=False) == (
        b"HTTP/1.1 103 Early Hints\r\nConnection: close\r\n\r\n")


def test_render_with_extra_headers_a_date_and_an_unknown_status() -> None:
    response = Response(299, b"{}", [(b"X-A", b"1"), (b"X-B", b"2")], content_type=b"application/json")
    assert render(response, version=b"1.0", date=b"D") == (
        b"HTTP/1.1 299 Unknown\r\nDate: D\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
        b"Connection: keep-alive\r\nX-A: 1\r\nX-B: 2\r\n\r\n{}")
