# examples/crawler.py
"""A web crawler, and the small site it crawls, both on one event loop.

This is the crawler of "A Web Crawler With asyncio Coroutines" (A. Jesse
Jiryu Davis and Guido van Rossum, 500 Lines or Less), done so that it still
runs: ``async``/``await`` where it had ``yield from``, asyncio.Queue where
it had JoinableQueue, and http_fetch.fetch (asyncio streams) where it had
aiohttp.  As in the original, ``max_tasks`` workers take URLs from one
queue, a redirect is queued as a new URL with one less ``max_redirect``, and
only URLs on the root's host are followed.

The site it crawls is served by this same program on 127.0.0.1, so a run
needs no network: ``--pages`` pages linking to each other, some broken links
(404), a moved page per ten (301), a redirect at ``/`` (302), a chain of
redirects longer than ``--max-redirect``, and a link off the site that must
not be followed::

    python examples/crawler.py --loop aio                 # crawl the site, print a report
    python examples/crawler.py --loop uvloop --max-tasks 2 --quiet
    python examples/crawler.py --serve-only --port 8080   # just serve it (Ctrl-C stops)

It stops by itself when the queue is empty and every worker idle.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import re
import sys
import time
import urllib.parse

import _loops
from http_fetch import Response, fetch

# -- The site ----------------------------------------------------------------------------

HOP_CHAIN = 5  # /hop/5 -> /hop/4 -> ... -> /hop/0 -> /page/0: six redirects in a row
REQUEST_TIMEOUT = 10.0  # seconds a client has to send its request


def page_links(i: int, pages: int) -> list[str]:
    """The links on page ``i`` of a site of ``pages`` pages: a fixed, tangled web."""
    links = [f"/page/{(i + 1) % pages}", f"/page/{(i * 7 + 3) % pages}"]
    if i % 5 == 0:
        links.append(f"/missing/{i}")                    # a broken link: 404
    if i % 10 == 3:
        links.append(f"/old/{i}")                        # moved: 301 to /page/i
    if i == 7 % pages:
        links.append(f"/hop/{HOP_CHAIN}")                # more redirects than max_redirect allows
    if i == 11 % pages:
        links.append("https://example.org/elsewhere")    # off the site: never fetched
    if i == 17 % pages:
        links.append("/page/2#top")                      # a fragment: the same page as /page/2
    return links


def site_response(path: str, pages: int) -> tuple[int, str, dict[str, str], bytes]:
    """(status, reason, headers, body) for a GET of ``path`` on the site."""
    kind, _, arg = path.strip("/").partition("/")
    number = int(arg) if arg.isdigit() else -1
    if path == "/":
        return 302, "Found", {"Location": "/page/0"}, b""
    if kind == "page" and 0 <= number < pages:
        items = "".join(f'<li><a href="{link}">{link}</a></li>\n' for link in page_links(number, pages))
        body = f"<!doctype html>\n<title>Page {number}</title>\n<h1>Page {number}</h1>\n<ul>\n{items}</ul>\n"
        return 200, "OK", {"Content-Type": "text/html; charset=utf-8"}, body.encode()
    if kind == "old" and 0 <= number < pages:
        return 301, "Moved Permanently", {"Location": f"/page/{number}"}, b""
    if kind == "hop" and 0 <= number <= HOP_CHAIN:
        target = f"/hop/{number - 1}" if number else "/page/0"
        return 301, "Moved Permanently", {"Location": target}, b""
    return 404, "Not Found", {"Content-Type": "text/plain"}, b"not found\n"


class Site:
    """The site's server: one response per connection, each after ``delay`` seconds.

    ``peak`` is the most requests it was answering at one time, which the
    crawler's ``max_tasks`` must bound.
    """

    def __init__(self, pages: int, delay: float) -> None:
        self.pages = pages
        self.delay = delay
        self.in_flight = 0
        self.peak = 0
        self.requests = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):  # a client that sends nothing is dropped
                request = await reader.readline()
                while (await reader.readline()).strip():  # the header fields: not needed here
                    pass
            method, path, _ = request.decode("latin-1").split(" ", 2)
            self.requests += 1
            await asyncio.sleep(self.delay)  # a server that takes a moment: workers overlap
            status, reason, headers, body = site_response(path, self.pages)
            head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}", "Connection: close"]
            head += [f"{name}: {value}" for name, value in headers.items()]
            writer.write("\r\n".join(head).encode("latin-1") + b"\r\n\r\n")
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (ValueError, ConnectionError, TimeoutError):
            pass  # a malformed request line, a client that went away or said nothing
        finally:
            self.in_flight -= 1
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass


# -- The crawler -------------------------------------------------------------------------

LINK = re.compile(r"""(?i)href=["']([^\s"'<>]+)""")  # the original's link pattern


@dataclasses.dataclass
class FetchStatistic:
    """One fetch, as the original's reporting.py printed it."""

    url: str
    next_url: str | None = None    # where a redirect pointed
    status: int | None = None      # None: the fetch failed (see exception)
    exception: str | None = None
    size: int = 0                  # bytes of body
    num_urls: int = 0              # links found on the page
    num_new_urls: int = 0          # of those, links not seen before and allowed


class Crawler:
    """Crawl every URL reachable from ``roots`` on the roots' hosts.

    ``max_redirect`` redirects are followed from any one link,
    ``max_tries`` attempts made at a URL whose fetch fails, and ``max_tasks``
    worker tasks fetch at most that many URLs at once.
    """

    def __init__(self, roots: list[str], *, max_redirect: int = 10, max_tries: int = 3,
                 max_tasks: int = 10, timeout: float = 10.0) -> None:
        self.roots = roots
        self.root_hosts = {urllib.parse.urlsplit(root).netloc for root in roots}
        self.max_redirect = max_redirect
        self.max_tries = max_tries
        self.max_tasks = max_tasks
        self.timeout = timeout
        self.queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self.seen_urls: set[str] = set()
        self.done: list[FetchStatistic] = []
        self.external: set[str] = set()          # links off the site, never fetched
        self.redirect_limit: list[str] = []      # redirects not followed: max_redirect reached
        self.t0 = self.t1 = 0.0
        for root in roots:
            self.add_url(root)

    def url_allowed(self, url: str) -> bool:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme == "http" and parts.netloc in self.root_hosts

    def add_url(self, url: str, max_redirect: int | None = None) -> None:
        self.seen_urls.add(url)
        self.queue.put_nowait((url, self.max_redirect if max_redirect is None else max_redirect))

    def parse_links(self, response: Response) -> set[str]:
        """The allowed links of an HTML ``response``, made absolute and without fragments."""
        links: set[str] = set()
        if response.status == 200 and response.headers.get("content-type", "").startswith("text/html"):
            for href in LINK.findall(response.body.decode("utf-8", errors="replace")):
                url, _ = urllib.parse.urldefrag(urllib.parse.urljoin(response.url, href))
                if self.url_allowed(url):
                    links.add(url)
                else:
                    self.external.add(url)
        return links

    async def fetch(self, url: str, max_redirect: int) -> None:
        """Fetch one URL, with retries; queue its new links, or its redirect's target."""
        error: BaseException | None = None
        for _ in range(self.max_tries):
            try:
                response = await fetch(url, timeout=self.timeout)
                break
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                error = exc
        else:  # every try failed
            self.done.append(FetchStatistic(url, exception=repr(error)))
            return
        if response.is_redirect:
            next_url, _ = urllib.parse.urldefrag(urllib.parse.urljoin(url, response.headers["location"]))
            self.done.append(FetchStatistic(url, next_url=next_url, status=response.status))
            if next_url in self.seen_urls:
                return
            if max_redirect > 0:
                self.add_url(next_url, max_redirect - 1)
            else:
                self.redirect_limit.append(next_url)
            return
        links = self.parse_links(response)
        new_links = links - self.seen_urls
        self.done.append(FetchStatistic(url, status=response.status, size=len(response.body),
                                        num_urls=len(links), num_new_urls=len(new_links)))
        for link in sorted(new_links):
            self.add_url(link)

    async def work(self) -> None:
        """A worker: fetch URLs from the queue until it is cancelled."""
        while True:
            url, max_redirect = await self.queue.get()
            try:
                await self.fetch(url, max_redirect)
            finally:
                self.queue.task_done()

    async def crawl(self) -> None:
        """Run ``max_tasks`` workers until the queue is empty and all are idle."""
        self.t0 = time.perf_counter()
        workers = [asyncio.create_task(self.work()) for _ in range(self.max_tasks)]
        try:
            await self.queue.join()
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self.t1 = time.perf_counter()


def _natural(url: str) -> list[object]:
    """A sort key that puts /page/2 before /page/10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", url)]


def report(crawler: Crawler, site: Site | None, loop_name: str, quiet: bool) -> None:
    """Print the crawl: one line per URL unless ``quiet``, then the counts."""
    statuses = collections.Counter(stat.status for stat in crawler.done)
    if not quiet:
        for stat in sorted(crawler.done, key=lambda stat: _natural(stat.url)):
            if stat.exception:
                print(f"  ERR {stat.url}  {stat.exception}")
            elif stat.next_url:
                print(f"  {stat.status} {stat.url} -> {stat.next_url}")
            else:
                print(f"  {stat.status} {stat.url}  {stat.size} bytes, "
                      f"{stat.num_urls} links, {stat.num_new_urls} new")
        for url in sorted(crawler.external):
            print(f"  --- {url}  (off the site: not followed)")
    redirects = sum(count for status, count in statuses.items() if status and 300 <= status < 400)
    others = sum(count for status, count in statuses.items()
                 if status and status not in (200, 404) and not 300 <= status < 400)
    print(f"crawled {', '.join(crawler.roots)} on {loop_name} in {crawler.t1 - crawler.t0:.2f} s")
    print(f"  urls fetched:         {len(crawler.done)}")
    print(f"  200 ok:               {statuses[200]}")
    print(f"  redirects:            {redirects}")
    print(f"  404 not found:        {statuses[404]}")
    print(f"  other statuses:       {others}")
    print(f"  failed fetches:       {statuses[None]}")
    print(f"  redirect limit hit:   {len(crawler.redirect_limit)}")
    print(f"  external skipped:     {len(crawler.external)}")
    if site is not None:
        print(f"  requests at once:     {site.peak} (max_tasks {crawler.max_tasks})")
    sys.stdout.flush()


async def main(args: argparse.Namespace) -> None:
    site = Site(args.pages, args.delay)
    server = await asyncio.start_server(site.serve, args.host, args.port)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"site of {args.pages} pages on {_loops.describe(asyncio.get_running_loop())}, "
          f"listening on {host}:{port}", flush=True)
    try:
        if args.serve_only:
            await server.serve_forever()
            return
        crawler = Crawler([f"http://{host}:{port}/"], max_redirect=args.max_redirect,
                          max_tasks=args.max_tasks, timeout=args.timeout)
        await crawler.crawl()
        report(crawler, site, args.loop, args.quiet)
    finally:
        server.close()
        await server.wait_closed()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _loops.make_parser(__doc__)
    parser.add_argument("--pages", type=int, default=30, help="pages on the site (default: 30)")
    parser.add_argument("--max-redirect", type=int, default=3,
                        help="redirects followed from one link (default: 3)")
    parser.add_argument("--max-tasks", type=int, default=5, help="workers fetching at once (default: 5)")
    parser.add_argument("--delay", type=float, default=0.01,
                        help="seconds the site takes per response (default: 0.01)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per fetch (default: 10)")
    parser.add_argument("--quiet", action="store_true", help="print the counts only, not every URL")
    parser.add_argument("--serve-only", action="store_true", help="serve the site until Ctrl-C; no crawl")
    _loops.add_address_options(parser, 0)
    args = parser.parse_args(argv)
    if args.pages < 1 or args.max_tasks < 1 or args.max_redirect < 0:
        parser.error("--pages and --max-tasks must be at least 1, --max-redirect at least 0")
    return args


if __name__ == "__main__":
    args = parse_args()
    _loops.run(lambda: main(args), args.loop)
    sys.exit(0)
