# examples/http_fetch.py
"""An HTTP/1.1 client on asyncio streams alone: fetch URLs from a local server.

Start a server, then fetch from it (several URLs are fetched at once)::

    python -m tinyloop serve aio --port 8000 &
    python examples/http_fetch.py --loop aio http://127.0.0.1:8000/
    python examples/crawler.py --serve-only --port 8080 &      # the crawler's site
    python examples/http_fetch.py --headers http://127.0.0.1:8080/ http://127.0.0.1:8080/page/1

It prints one line per URL (status, size, type) and, with ``--body``, the
bodies.  It exits 0 when every URL answered (whatever the status), 1 when
one could not be fetched.  Only ``http://`` URLs: TLS is a chapter of its
own.  crawler.py uses ``fetch`` from here.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import urllib.parse

import _loops

MAX_HEADER_LINE = 8192       # bytes; a longer status or header line is an error
MAX_BODY = 16 * 1024 * 1024  # bytes we are willing to keep of one body


@dataclasses.dataclass
class Response:
    """What one request got: ``status`` (an int), ``reason``, ``headers`` with
    lower-case names (a repeated header's values joined by ", "), ``body``."""

    url: str
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes

    @property
    def is_redirect(self) -> bool:
        return self.status in (301, 302, 303, 307, 308) and "location" in self.headers


class HTTPError(Exception):
    """The server's answer was not HTTP/1.x as RFC 9112 describes it."""


async def fetch(url: str, *, timeout: float = 10.0) -> Response:
    """GET ``url`` on a new connection, closed after the response.

    Returns a :class:`Response`.  Raises ValueError for a URL that is not
    ``http://``, OSError if the connection fails, TimeoutError after
    ``timeout`` seconds, HTTPError for a malformed response, and
    asyncio.IncompleteReadError if the server closes mid-body.  Source:
    RFC 9112 (message syntax, chunked transfer coding, section 7.1).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http:// URL: {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80,
                                                       limit=MAX_HEADER_LINE)
        try:
            writer.write(f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                         "User-Agent: tinyloop-example\r\nAccept-Encoding: identity\r\n"
                         "Connection: close\r\n\r\n".encode("ascii"))
            await writer.drain()
            status, reason, headers = await read_head(reader)
            body = await read_body(reader, status, headers)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass
    return Response(url, status, reason, headers, body)


async def read_head(reader: asyncio.StreamReader) -> tuple[int, str, dict[str, str]]:
    """Read the status line and the header fields, up to the blank line."""
    line = (await reader.readline()).decode("latin-1")
    version, _, rest = line.rstrip("\r\n").partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise HTTPError(f"bad status line {line!r}")
    headers: dict[str, str] = {}
    while (line := (await reader.readline()).decode("latin-1").rstrip("\r\n")):
        name, colon, value = line.partition(":")
        if not colon:
            raise HTTPError(f"bad header line {line!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), reason, headers


async def read_body(reader: asyncio.StreamReader, status: int, headers: dict[str, str]) -> bytes:
    """Read the body, framed as RFC 9112 section 6.3 says: chunked, Content-Length, or to EOF."""
    if status < 200 or status in (204, 304):
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = (await reader.readline()).split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise HTTPError(f"bad chunk size {size_line!r}") from None
            if size == 0:
                while (await reader.readline()).strip():  # trailer fields, ignored
                    pass
                return bytes(body)
            if len(body) + size > MAX_BODY:
                raise HTTPError("body larger than MAX_BODY")
            body += await reader.readexactly(size)
            await reader.readexactly(2)  # the CRLF after each chunk
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length > MAX_BODY:
            raise HTTPError("body larger than MAX_BODY")
        return await reader.readexactly(length)
    return await reader.read(MAX_BODY)  # no framing: the body ends when the connection does


async def main(args: argparse.Namespace) -> bool:
    results = await asyncio.gather(*(fetch(url, timeout=args.timeout) for url in args.urls),
                                   return_exceptions=True)
    ok = True
    for url, result in zip(args.urls, results):
        if isinstance(result, BaseException):
            print(f"ERR {url}  {result!r}", flush=True)
            ok = False
            continue
        kind = result.headers.get("content-type", "-")
        print(f"{result.status} {result.reason}  {url}  {len(result.body)} bytes  {kind}", flush=True)
        if args.headers:
            for name, value in result.headers.items():
                print(f"    {name}: {value}")
        if args.body:
            print(result.body.decode(errors="replace"))
    return ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _loops.make_parser(__doc__)
    parser.add_argument("urls", nargs="+", metavar="URL", help="http:// URLs to fetch, all at once")
    parser.add_argument("--headers", action="store_true", help="print each response's headers")
    parser.add_argument("--body", action="store_true", help="print each response's body")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per URL (default: 10)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    sys.exit(0 if _loops.run(lambda: main(args), args.loop) else 1)
