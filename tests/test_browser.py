"""The built book, loaded in a real browser, at a desktop's and a phone's width.

A build that passes -W -n can still ship a page whose script throws, whose
listing wraps and loses its indentation, whose chart leaves out a row its
table has, or that scrolls sideways on a phone; only a browser sees that.
This module builds the book once, serves it on 127.0.0.1, and loads every
chapter in headless Chromium (Debian's ``chromium`` package; scripts/setup.sh
installs it) at 1280 and at 390 CSS px, driven through the DevTools protocol
(websocket-client).  On every chapter, at both widths:

  * no JavaScript exception, console error, or resource that fails to load;
  * no page scrolls sideways, and every result table fits the column (a
    wide one stacks its rows on a phone, so its CPU column stays on screen);
  * no listing line wraps: each listing's height is its line count times
    its line height, and a line longer than the column scrolls inside its
    block;
  * every benchmark chart has the rows of the table it stands beside, in
    its order, and says why a row has no bar as the table does;
  * every trace figure draws its whole window (the one its caption names)
    stretched to the column, every mark of it on screen
    (test_trace_figures_show_their_whole_window).

Rules this file keeps:
  * Nothing leaves the machine: the browser is started with its background
    networking, updates and sync off, in a fresh profile, and the site is
    served from 127.0.0.1.  Every wait has a deadline.
  * Without Chromium the tests are skipped, saying what to install.
  * Slow (a whole-book build, then about 30 page loads): the slow step.
"""

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

from tests.test_docs import BUILD_TIMEOUT, CHAPTERS, chapter_files, sphinx_build

websocket = pytest.importorskip("websocket", reason="websocket-client is in the dev extra")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]  # one whole-book build, shared by the module

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PAGES = [f"{chapter.stem}.html" for chapter in chapter_files()]  # every chapter, the landing page included
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
    assert "python -m tinyloop start" in found["text"] and "Try it first" in found["text"], found
    assert found["highlighted"] > 0, "the listing after the callout highlights no line of the region"
    benchmarks = browser.load(site + "benchmarks.html")
    assert not problems(benchmarks)
    charts = browser.evaluate("document.querySelectorAll('figure.book-bench-chart svg').length")
    assert charts >= 3, f"the benchmarks page has {charts} charts, one per load expected"


# What a page looks like to its reader, measured in the page (CSS px).
_LAYOUT = r"""(() => {
  const column = document.querySelector('article[role=main]') || document.body;
  const right = column.getBoundingClientRect().right;
  const visible = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const pres = Array.from(document.querySelectorAll('div.highlight pre'));
  const wrapped = [], notKept = [], outside = [];
  for (const pre of pres) {
    const style = getComputedStyle(pre);
    if (style.whiteSpace !== 'pre') notKept.push(style.whiteSpace);
    if (!visible(pre)) continue;  // a closed dropdown, a tab not chosen: its CSS is checked above
    const lines = pre.textContent.replace(/\n$/, '').split('\n').length;
    const line = parseFloat(style.lineHeight);
    const height = pre.getBoundingClientRect().height - parseFloat(style.paddingTop)
                   - parseFloat(style.paddingBottom) - parseFloat(style.borderTopWidth)
                   - parseFloat(style.borderBottomWidth);
    if (height > (lines + 0.5) * line)
      wrapped.push({first: pre.textContent.split('\n')[0].slice(0, 60), lines: lines,
                    rows: Math.round(height / line)});
    const box = pre.closest('div.highlight').getBoundingClientRect();
    if (box.right > right + 1) outside.push(pre.textContent.split('\n')[0].slice(0, 60));
  }
  const tables = Array.from(document.querySelectorAll('table.book-table'));
  // A table must need no sideways scroll in the box furo wraps it in.
  const cut = tables.filter(visible).filter(table => {
      const box = table.closest('.table-wrapper') || table.parentElement;
      return box.scrollWidth > box.clientWidth + 1 || box.getBoundingClientRect().right > right + 8; })
    .map(table => (table.caption ? table.caption.innerText : table.innerText).slice(0, 60));
  const charts = Array.from(document.querySelectorAll('svg.book-chart-svg[data-load]')).map(svg => {
    const load = svg.dataset.load;
    const before = Array.from(document.querySelectorAll('table.book-bench')).filter(table =>
        table.compareDocumentPosition(svg) & Node.DOCUMENT_POSITION_FOLLOWING
        && table.caption && table.caption.innerText.startsWith(load + ':'));
    const table = before.length ? before[before.length - 1] : null;
    return {load: load, rows: JSON.parse(svg.dataset.rows),
            table: table ? Array.from(table.tBodies[0].rows).map(row => row.cells[0].innerText.trim()) : null,
            texts: Array.from(svg.querySelectorAll('text')).map(text => text.textContent.trim())};
  });
  return {viewport: window.innerWidth, column: document.documentElement.clientWidth,
          pageWidth: document.documentElement.scrollWidth, listings: pres.length,
          wrapped: wrapped, notKept: notKept, outside: outside, cut: cut, charts: charts};
})()"""


def _at_width(browser: DevTools, width: str) -> None:
    w, h, mobile = WIDTHS[width]
    browser.call("Emulation.setDeviceMetricsOverride", width=w, height=h, deviceScaleFactor=1, mobile=mobile)


@pytest.mark.timeout(BUILD_TIMEOUT + 120)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_a_chapter_reads_at_desktop_and_phone_widths(site: str, browser: DevTools, page: str,
                                                     width: str) -> None:
    _at_width(browser, width)
    try:
        events = browser.load(site + page)
        found = browser.evaluate(_LAYOUT)
        sheets = browser.evaluate("document.styleSheets.length")
        broken = browser.evaluate("Array.from(document.images)"
                                  ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
        font = browser.evaluate("getComputedStyle(document.body).fontFamily")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    where = f"{page} at {WIDTHS[width][0]} px"
    assert not problems(events), f"{where}:\n" + "\n".join(problems(events))
    assert isinstance(sheets, int) and sheets >= 2, f"{where}: {sheets} stylesheets"
    assert broken == [], f"{where}: images that did not load: {broken}"
    assert font and "Times" not in str(font), f"{where}: body font {font!r}: no theme stylesheet?"
    assert found["viewport"] == WIDTHS[width][0], found["viewport"]
    assert found["pageWidth"] <= found["column"], \
        f"{where}: the page scrolls sideways ({found['pageWidth']} px > {found['column']})"
    assert not found["notKept"], f"{where}: listings with white-space {set(found['notKept'])}, not pre"
    assert not found["wrapped"], f"{where}: listing lines wrap: {found['wrapped']}"
    assert not found["outside"], f"{where}: listings wider than the column: {found['outside']}"
    assert not found["cut"], f"{where}: result tables cut at the column's edge: {found['cut']}"
    for chart in found["charts"]:
        assert chart["table"] is not None, f"{where}: the {chart['load']} chart has no table before it"
        assert chart["rows"] == chart["table"], \
            f"{where}: the {chart['load']} chart's rows {chart['rows']} are not its table's {chart['table']}"
        assert all(name in chart["texts"] for name in chart["rows"]), \
            f"{where}: the {chart['load']} chart does not label every row: {chart['texts']}"
        assert "no figure" not in chart["texts"], f"{where}: the {chart['load']} chart has a row without a figure"


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
@pytest.mark.parametrize("width", WIDTHS)
def test_the_libuv_charts_keep_their_whiskers_and_legible_text(site: str, browser: DevTools,
                                                               width: str) -> None:
    # The libuv chapter's charts: there, with their whiskers, no wider than
    # the screen, their text legible; its named sources are links.
    _at_width(browser, width)
    try:
        browser.load(site + "libuv.html")
        found = browser.evaluate("""(() => {
            const charts = Array.from(document.querySelectorAll('figure.book-bench-chart svg'));
            const labels = charts.flatMap(svg => Array.from(svg.querySelectorAll('text')));
            return {
              figures: document.querySelectorAll('figure').length,
              charts: charts.length,
              widest: Math.max(0, ...charts.map(svg => svg.getBoundingClientRect().width)),
              whiskers: charts.map(svg => svg.querySelectorAll('[id^="book-whisker-"]').length),
              smallestText: Math.min(...labels.map(t => t.getBoundingClientRect().height).filter(x => x > 0)),
              links: Array.from(document.querySelectorAll('a[href^="http"]')).map(a => a.href),
            };
        })()""")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    w = WIDTHS[width][0]
    assert found["charts"] >= 2 and found["figures"] >= found["charts"], found
    assert all(count > 0 for count in found["whiskers"]), f"{width}: a chart without whiskers {found['whiskers']}"
    assert found["widest"] <= w, f"{width}: a chart is {found['widest']} px wide"
    assert found["smallestText"] >= 8, f"{width}: chart text {found['smallestText']:.1f} px high"
    for source in ("docs.libuv.org", "man7.org", "github.com/MagicStack/uvloop", "github.com/libuv/libuv"):
        assert any(source in link for link in found["links"]), f"no link to {source}"


TRACE_PAGES = [page for page in PAGES
               if "{trace-figure}" in (CHAPTERS / page.replace(".html", ".md")).read_text(encoding="utf-8")]


@pytest.mark.timeout(BUILD_TIMEOUT + 60)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", TRACE_PAGES)
def test_trace_figures_show_their_whole_window(site: str, browser: DevTools, page: str, width: str) -> None:
    # A trace figure draws the window its caption is about (cut when the
    # book is built; its length in µs is the timeline's data-span) and
    # stretches it to the column (tinyloop/trace/timeline.py): each band is
    # an SVG whose viewBox is that whole window and whose box is the
    # timeline's width, the timeline fits the column, and every mark placed
    # in time (data-ts: spans' names, counter values, axis ticks) is inside
    # the visible box, so the span the caption names is on screen, at
    # 1280 px and on a phone.
    _at_width(browser, width)
    try:
        browser.load(site + page)
        figures = browser.evaluate("""Array.from(document.querySelectorAll('figure.book-trace-figure'))
          .map(figure => {
            const timeline = figure.querySelector('.timeline');
            if (!timeline) return {id: figure.id, timeline: false};
            const box = timeline.getBoundingClientRect();
            const column = figure.parentElement.getBoundingClientRect();
            const span = parseFloat(timeline.dataset.span);
            const bands = Array.from(timeline.querySelectorAll('svg')).map(svg => {
              const view = (svg.getAttribute('viewBox') || '').split(/[ ,]+/).map(Number);
              const drawn = svg.getBoundingClientRect();
              return {view: view.length === 4 ? view[2] : null, left: drawn.left - box.left,
                      right: drawn.right - box.right};
            });
            const outside = Array.from(timeline.querySelectorAll('[data-ts]')).filter(mark => {
              const r = mark.getBoundingClientRect();
              return r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1);
            }).map(mark => `${mark.className} "${mark.textContent.slice(0, 20)}" at ${mark.dataset.ts} µs`);
            return {id: figure.id, timeline: true, span: span, bands: bands, outside: outside,
                    fits: box.left >= column.left - 1 && box.right <= column.right + 1,
                    clipped: timeline.scrollWidth > timeline.clientWidth + 1};
          })""")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    assert figures, f"{page}: no trace figure"
    for figure in figures:
        where = f"{page} at {WIDTHS[width][0]} px, {figure['id']}"
        assert figure["timeline"], f"{where}: no timeline"
        assert figure["fits"], f"{where}: the timeline is wider than the column"
        assert figure["bands"], f"{where}: no band drawn"
        for band in figure["bands"]:
            assert band["view"] is not None and abs(band["view"] - figure["span"]) <= 1e-3 * figure["span"], \
                f"{where}: a band's viewBox ({band['view']}) is not the window ({figure['span']} µs)"
            assert abs(band["left"]) <= 1 and abs(band["right"]) <= 1, \
                f"{where}: a band is not stretched to the timeline's width ({band})"
        assert not figure["outside"] and not figure["clipped"], \
            f"{where}: marks outside the visible box: {figure['outside']}"
