# tests/test_browser.py
#
# The built book, loaded in a real browser.  A build that passes -W -n can
# still ship a page whose script throws, whose stylesheet is missing or whose
# plot does not load; only a browser sees that.  This test builds the book,
# serves it on 127.0.0.1, and loads the index, a chapter and the benchmarks
# page in headless Chromium (Debian's `chromium` package; scripts/setup.sh
# installs it), driven through the DevTools protocol (websocket-client).
#
# Rules this file keeps:
#   * A page fails on any JavaScript exception or console error, any
#     stylesheet, script or image that does not load (an HTTP error or a
#     failed request), and any <img> that did not decode.
#   * Nothing leaves the machine: the browser is started with its background
#     networking, updates and sync off, in a fresh profile, and the site is
#     served from 127.0.0.1.  Every wait has a deadline.
#   * Without Chromium the test is skipped, saying what to install.

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_docs import BUILD_TIMEOUT, sphinx_build, CHAPTERS

websocket = pytest.importorskip("websocket", reason="websocket-client is in the dev extra")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]  # one whole-book build, shared by the module

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PAGES = ("index.html", "readiness.html", "benchmarks.html")
WIDTHS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}  # CSS px; phone: an iPhone 12-14
LOAD_TIMEOUT = 20.0  # seconds for one page to load and settle


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium found: install it (Debian: apt-get install chromium; "
                "scripts/setup.sh does) to check the built book in a browser")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The book, built and served on 127.0.0.1; yields its base URL."""
    out = tmp_path_factory.mktemp("book")
    result = sphinx_build(CHAPTERS, out)
    assert result.returncode == 0, result.stdout + result.stderr
    handler = functools.partial(_QuietHandler, directory=str(out / "html"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class DevTools:
    """One page of a headless Chromium, driven over the DevTools protocol."""

    def __init__(self, browser: str, profile: Path) -> None:
        self.proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
             f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"  # Chromium writes its port here
        deadline = time.monotonic() + LOAD_TIMEOUT
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("Chromium did not start (no DevToolsActivePort)")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as reply:
            pages = [t for t in json.load(reply) if t["type"] == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=LOAD_TIMEOUT)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: object) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def load(self, url: str) -> list[dict]:
        """Navigate to ``url``, wait for its load event and a quiet moment; return its events."""
        self.events = []
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + LOAD_TIMEOUT
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading in {LOAD_TIMEOUT:g} s")
            self.events.append(json.loads(self.ws.recv()))
        self.ws.settimeout(0.5)  # scripts run on load: give their errors time to arrive
        try:
            while True:
                self.events.append(json.loads(self.ws.recv()))
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.ws.settimeout(LOAD_TIMEOUT)
        return self.events

    def evaluate(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.kill()
        self.proc.wait(timeout=10)


def problems(events: list[dict]) -> list[str]:
    """What went wrong on a page, one line each, from its DevTools events."""
    found = []
    kinds: dict[str, str] = {}  # request id -> resource type
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            kinds[params["requestId"]] = params.get("type", "")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            found.append(f"JavaScript exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            found.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                      for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            found.append(f"browser error: {params['entry']['text']} {params['entry'].get('url', '')}")
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            found.append(f"{params.get('type', '')} {params['response']['url']}: "
                         f"HTTP {params['response']['status']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            found.append(f"{params.get('type') or kinds.get(params['requestId'], '')} did not load: "
                         f"{params.get('errorText')}")
    return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    executable = find_browser()
    tools = DevTools(executable, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield tools
    finally:
        tools.close()


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
@pytest.mark.parametrize("page", PAGES)
def test_a_page_loads_without_errors(site: str, browser: DevTools, page: str) -> None:
    events = browser.load(site + page)
    assert not problems(events), f"{page}:\n" + "\n".join(problems(events))
    # Every stylesheet applied, every image decoded.
    sheets = browser.evaluate("document.styleSheets.length")
    assert isinstance(sheets, int) and sheets >= 2, f"{page}: {sheets} stylesheets"
    broken = browser.evaluate("Array.from(document.images)"
                              ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
    assert broken == [], f"{page}: images that did not load: {broken}"
    # The theme's own stylesheet is there (the page is not unstyled HTML).
    font = browser.evaluate("getComputedStyle(document.body).fontFamily")
    assert font and "Times" not in str(font), f"{page}: body font {font!r}: no theme stylesheet?"


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
def test_a_listing_is_whole_after_its_exercise_callout(site: str, browser: DevTools) -> None:
    # The reader's edition: a callout names the exercise, then the listing
    # shows the region in place, its lines highlighted.
    events = browser.load(site + "readiness.html")
    assert not problems(events)
    found = browser.evaluate("""(() => {
        const box = document.querySelector('div.book-try-first');
        if (!box) return null;
        let next = box.nextElementSibling;
        while (next && !next.querySelector('pre')) next = next.nextElementSibling;
        return {text: box.innerText, highlighted: next ? next.querySelectorAll('.hll').length : 0};
    })()""")
    assert found, "readiness.html has no exercise callout"
    assert "python -m tinyloop start" in found["text"] and "Try it before you read on" in found["text"], found
    assert found["highlighted"] > 0, "the listing after the callout highlights no line of the region"
    benchmarks = browser.load(site + "benchmarks.html")
    assert not problems(benchmarks)
    charts = browser.evaluate("document.querySelectorAll('figure.book-bench-chart svg').length")
    assert charts >= 3, f"the benchmarks page has {charts} charts, one per load expected"


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
@pytest.mark.parametrize("width", WIDTHS)
def test_a_chapter_reads_at_desktop_and_phone_widths(site: str, browser: DevTools, width: str) -> None:
    # The libuv chapter at 1280 and at 390 CSS px: its charts are there with
    # their whiskers, fit the column and keep their text legible; its named
    # sources are links; no listing runs off its block; nothing scrolls the
    # page sideways.
    w, h, mobile = WIDTHS[width]
    browser.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=mobile)
    try:
        events = browser.load(site + "libuv.html")
        assert not problems(events), "\n".join(problems(events))
        found = browser.evaluate("""(() => {
            const charts = Array.from(document.querySelectorAll('figure.book-bench-chart svg'));
            const labels = charts.flatMap(svg => Array.from(svg.querySelectorAll('text')));
            const pre = Array.from(document.querySelectorAll('div.highlight pre'));
            return {
              viewport: window.innerWidth,
              column: document.documentElement.clientWidth,
              pageWidth: document.documentElement.scrollWidth,
              figures: document.querySelectorAll('figure').length,
              charts: charts.length,
              widest: Math.max(0, ...charts.map(svg => svg.getBoundingClientRect().width)),
              whiskers: charts.map(svg => svg.querySelectorAll('[id^="book-whisker-"]').length),
              smallestText: Math.min(...labels.map(t => t.getBoundingClientRect().height).filter(x => x > 0)),
              overflowing: pre.filter(p => p.scrollWidth > p.clientWidth + 1).length,
              links: Array.from(document.querySelectorAll('a[href^="http"]')).map(a => a.href),
            };
        })()""")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    assert found["viewport"] == w, found["viewport"]
    assert found["pageWidth"] <= found["column"], \
        f"{width}: the page scrolls sideways ({found['pageWidth']} px > {found['column']})"
    assert found["charts"] >= 2 and found["figures"] >= found["charts"], found
    assert all(count > 0 for count in found["whiskers"]), f"{width}: a chart without whiskers {found['whiskers']}"
    assert found["widest"] <= w, f"{width}: a chart is {found['widest']} px wide"
    assert found["smallestText"] >= 8, f"{width}: chart text {found['smallestText']:.1f} px high"
    assert found["overflowing"] == 0, f"{width}: {found['overflowing']} listings run off their block"
    for source in ("docs.libuv.org", "man7.org", "github.com/MagicStack/uvloop", "github.com/libuv/libuv"):
        assert any(source in link for link in found["links"]), f"no link to {source}"
