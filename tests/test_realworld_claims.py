"""The comparisons Parts V and VI make in words hold for the committed results they quote.

The figures themselves reach the page through ``{result}`` (docs/_ext/book_numbers.py), so a new
reference run changes them by itself.  What a new run can silently break is the sentence around
them: "the ranges do not meet", "no cheaper", "inside the range of asyncio's repetitions".  Each
test here reads the same JSON the chapter quotes and checks the words the chapter uses, so a run
that reverses one fails here and the sentence is rewritten, not left standing.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHAPTERS = ROOT / "chapters"


def _json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _text(name: str) -> str:
    return " ".join((CHAPTERS / name).read_text(encoding="utf-8").split())


def _tornado(handler: str, tool: str, loop: str) -> dict:
    [row] = [r for r in _json("tornado.json")["results"]
             if (r["handler"], r["tool"], r["loop"]) == (handler, tool, loop)]
    return row


def test_tornado_db_rows_c_transports_below_python_ones_with_ranges_apart() -> None:
    text = _text("realworld/tornado.md")
    assert "the ranges do not meet" in text
    c_loops, python_loops = ("uvloop", "uv"), ("asyncio", "aio", "ring")
    slowest_c = max(c_loops, key=lambda loop: _tornado("db", "wrk", loop)["spread"]["app_cpu_us_per_req"][1])
    fastest_py = min(python_loops, key=lambda loop: _tornado("db", "wrk", loop)["spread"]["app_cpu_us_per_req"][0])
    # The chapter names whose repetition bounds each side.
    assert slowest_c == "uvloop" and fastest_py == "ring", (slowest_c, fastest_py)
    assert (_tornado("db", "wrk", slowest_c)["spread"]["app_cpu_us_per_req"][1]
            < _tornado("db", "wrk", fastest_py)["spread"]["app_cpu_us_per_req"][0])


def test_tornado_hello_rows_the_c_loops_are_no_cheaper() -> None:
    text = _text("realworld/tornado.md")
    assert "the two loops in C are no cheaper" in text
    asyncio_row = _tornado("hello", "wrk", "asyncio")
    for loop in ("uvloop", "uv"):
        row = _tornado("hello", "wrk", loop)
        assert row["app_cpu_us_per_req"] >= asyncio_row["app_cpu_us_per_req"], loop
        # "with repetitions that reach down to asyncio's"
        assert row["spread"]["app_cpu_us_per_req"][0] <= asyncio_row["spread"]["app_cpu_us_per_req"][1], loop


def test_tornado_rloop_rows_fail_on_asyncpgs_set_protocol_as_the_chapter_says() -> None:
    text = _text("realworld/tornado.md")
    rows = [r for r in _json("tornado.json")["results"] if r["loop"] == "rloop"]
    if not rows:
        assert "The rloop rows have no figures" not in text, "no rloop rows: drop the sentence about them"
        return
    assert "The rloop rows have no figures" in text
    assert all(r["status"] != "ok" and "TCPTransport protocol cannot be changed" in (r["note"] or "")
               for r in rows), [r["note"] for r in rows]


def test_tornado_a_connection_per_request_costs_the_database_most() -> None:
    for loop in ("asyncio", "uvloop", "aio", "uv", "ring"):
        pooled, connecting = _tornado("db", "wrk", loop), _tornado("db-connect", "wrk", loop)
        assert connecting["db_cpu_us_per_req"] > 5 * pooled["db_cpu_us_per_req"], loop  # "far more"
        assert connecting["app_cpu_us_per_req"] > pooled["app_cpu_us_per_req"], loop   # "grows too"


def test_pipeline_uv_and_uvloop_inside_asyncios_range_and_aio_above_it() -> None:
    text = _text("realworld/pipelining.md")
    rows = _json("pipeline.json")["results"]["wrk-pipeline"]
    low, high = rows["asyncio-protocol"]["spread"]["cpu_us_per_req"]
    for name in ("uv", "uvloop-protocol"):
        assert low <= rows[name]["cpu_us_per_req"] <= high, name
    assert "`aio` is the exception" in text
    assert rows["aio"]["spread"]["cpu_us_per_req"][0] > high
    noisy = sum(1 for row in rows.values() if row.get("noisy"))
    assert "Most rows are marked *noisy*" in text and noisy > len(rows) / 2


def test_pipeline_the_gap_to_the_c_floor_widens_with_depth() -> None:
    depth_1 = _json("latest.json")["results"]["wrk"]["c-epoll"]["ratio"]["cpu_us_per_req"]
    depth_24 = _json("pipeline.json")["results"]["wrk-pipeline"]["c-epoll"]["ratio"]["cpu_us_per_req"]
    assert depth_24 < depth_1


def test_pipeline_node_row_is_partial_as_the_chapter_says() -> None:
    text = _text("realworld/pipelining.md")
    node = _json("pipeline.json")["results"]["wrk-pipeline"]["node-http"]
    assert "repetitions answered it, and its row (marked `*`)" in text
    assert node["status"] == "partial" and node["ok_runs"] < node["runs"]


def test_benchmarks_blocking_level_with_epoll_under_ab_close() -> None:
    text = _text("benchmarks.md")
    assert "their repetitions' ranges overlapping" in text
    rows = _json("latest.json")["results"]["ab-close"]
    blocking, epoll = (rows[name]["spread"]["cpu_us_per_req"] for name in ("blocking", "epoll"))
    assert blocking[0] <= epoll[1] and epoll[0] <= blocking[1]


DEFAULT, UNPINNED = "load=1 proxy=0 app=0 db=0", "load=any proxy=any app=any db=any"


def _notfaster(layout: str) -> dict[str, dict]:
    return {row["app"]: row for row in _json("notfaster.json")["layouts"][layout]["rows"]}


def test_notfaster_the_sync_row_sorts_where_the_chapter_says() -> None:
    text = _text("realworld/notfaster.md")
    default = _notfaster(DEFAULT)
    ok = sorted((row for row in default.values() if row["status"] == "ok"), key=lambda row: row["p99_ms"])
    above = [row["app"] for row in ok[:[row["app"] for row in ok].index("gunicorn-falcon")]]
    assert "it sorts fourth, below `aiohttp-ring`, `uvicorn-starlette-ring` and `uvicorn-starlette-uv`" in text
    assert above == ["aiohttp-ring", "uvicorn-starlette-ring", "uvicorn-starlette-uv"], above
    sync_low = default["gunicorn-falcon"]["spread"]["p99_ms"][0]
    wholly_below = [app for app in above if default[app]["spread"]["p99_ms"][1] < sync_low]
    assert wholly_below == ["aiohttp-ring"], wholly_below  # "only aiohttp-ring's repetitions all lie below"
    unpinned = _notfaster(UNPINNED)
    sync_high = unpinned["gunicorn-falcon"]["spread"]["p99_ms"][1]
    assert all(row["spread"]["p99_ms"][0] > sync_high
               for app, row in unpinned.items() if app != "gunicorn-falcon" and row["status"] == "ok")


def test_notfaster_every_async_row_serves_more_and_spreads_its_tail_more() -> None:
    for layout in (DEFAULT, UNPINNED):
        rows = {app: row for app, row in _notfaster(layout).items() if row["status"] == "ok"}
        sync = rows.pop("gunicorn-falcon")
        assert all(row["rps"] > sync["rps"] for row in rows.values()), layout
        tails = [row["p99_ms"] / row["p50_ms"] for row in rows.values()]
        # "from about twice theirs to more than ten times"; the sync row's is the smallest
        assert sync["p99_ms"] / sync["p50_ms"] < min(tails) and min(tails) > 1.8 and max(tails) > 10, layout


def test_notfaster_the_framework_moves_app_cpu_more_than_the_loop() -> None:
    for layout in (DEFAULT, UNPINNED):
        rows = _notfaster(layout)
        sync = rows["gunicorn-falcon"]["app_us_per_req"]
        for framework in ("uvicorn-starlette", "aiohttp"):
            loops = [row["app_us_per_req"] for app, row in rows.items()
                     if app.startswith(framework + "-") and row["status"] == "ok"]
            assert sync - rows[f"{framework}-asyncio"]["app_us_per_req"] > max(loops) - min(loops), (layout, framework)
    default = _notfaster(DEFAULT)
    async_cpu = {app: row["app_us_per_req"] for app, row in default.items()
                 if row["status"] == "ok" and app != "gunicorn-falcon"}
    assert min(async_cpu, key=async_cpu.get) == "uvicorn-starlette-uv"
    assert max(async_cpu, key=async_cpu.get) == "uvicorn-starlette-asyncio"
    # "under uvicorn by half"
    assert async_cpu["uvicorn-starlette-uv"] <= 0.55 * async_cpu["uvicorn-starlette-asyncio"]


def test_notfaster_worker_counts_as_the_chapter_gives_them() -> None:
    default, unpinned = _notfaster(DEFAULT), _notfaster(UNPINNED)
    assert default["gunicorn-falcon"]["workers"] == 1 and unpinned["gunicorn-falcon"]["workers"] == 3
    search = default["gunicorn-falcon"]["search"]
    assert search[1]["rps"] < search[0]["rps"]  # "a second worker adds process switches, not throughput"
    limit = _json("notfaster.json")["layouts"][DEFAULT]["settings"]["max_workers"]
    climbing = [app for app, row in default.items() if row["status"] == "ok"
                and len(row["search"]) == limit
                and all(a["rps"] < b["rps"] for a, b in zip(row["search"], row["search"][1:]))]
    assert climbing == ["aiohttp-ring"], climbing
    assert all(row["workers"] <= 2 for app, row in default.items()
               if row["status"] == "ok" and app not in ("gunicorn-falcon", "aiohttp-ring"))
    assert all(row["server_cores"] > 1.2 for row in unpinned.values() if row["status"] == "ok")


def test_notfaster_rloop_rows_did_not_start() -> None:
    for layout in (DEFAULT, UNPINNED):
        rows = _notfaster(layout)
        for app in ("uvicorn-starlette-rloop", "aiohttp-rloop"):
            assert rows[app]["status"] == "failed" and "did not start" in rows[app]["note"], (layout, app)


def _workers(server: str, workers: int, shared: bool) -> dict:
    [row] = [r for r in _json("workers.json")["rows"]
             if (r["server"], r["workers"], r["shared"]) == (server, workers, shared)]
    return row


SERVERS = ("epoll", "aio", "uvloop-protocol")


def test_workers_the_control_row_adds_no_work_and_only_epolls_ranges_barely_touch() -> None:
    text = _text("realworld/workers.md")
    assert "two workers' CPU per request is no higher than one's" in text
    for server in SERVERS:
        one, two = _workers(server, 1, False), _workers(server, 2, False)
        assert two["cpu_us_per_req"] <= one["cpu_us_per_req"], server
        overlap = one["spread"]["rps"][1] - two["spread"]["rps"][0]
        if server == "epoll":
            assert 0 <= overlap < 0.05 * one["rps"], "epoll: the ranges no longer 'barely touch'"
        else:
            assert overlap > 0.05 * one["rps"], f"{server}: the ranges no longer overlap well"


def test_workers_on_two_cores_the_second_worker_uses_time_wrk_leaves() -> None:
    for server in SERVERS:
        control, shared = _workers(server, 2, False), _workers(server, 2, True)
        assert 0.95 <= control["server_cores_busy"] <= 1.05 and shared["server_cores_busy"] > 1.2, server
        assert 0.35 <= shared["wrk_core_busy"] <= 0.65, server  # "only about half busy"
        gain_rps = shared["rps"] / control["rps"]
        gain_time = shared["server_cores_busy"] / control["server_cores_busy"]
        assert gain_rps < gain_time and shared["cpu_us_per_req"] > control["cpu_us_per_req"], server
    assert all(0.35 <= row["wrk_core_busy"] <= 0.65 for row in _json("workers.json")["rows"])


def _syscalls(name: str) -> dict[tuple[str, int], dict]:
    data = _json(name)
    points = data["syscalls"]["points"] if "syscalls" in data else data["points"]
    return {(p["server"], p["depth"]): p for p in points if p.get("per_request")}


def test_pipelining_syscall_counts_as_the_chapter_reads_them() -> None:
    text = _text("realworld/pipelining.md")
    counts = _syscalls("syscalls.json")
    for server in ("uring", "uring-multishot", "ring", "c-uring"):
        per = counts[(server, 1)]["per_request"]
        assert per["read"] == 0 and per["write"] == 0, server  # "make no read or write at all"
    for server in ("epoll-et", "coroutines"):
        assert counts[(server, 1)]["per_request"]["read"] > 1.04, server
    for server in ("rloop-protocol", "rloop-streams"):
        assert round(counts[(server, 1)]["per_request"]["read"]) == 2, server  # "two reads per request"
    threaded = counts[("threaded", 1)]["calls"]
    assert max(threaded, key=threaded.get) == "futex"
    for server in ("go-nethttp", "node-http"):  # "their write column hardly moves"
        assert counts[(server, 24)]["per_request"]["write"] > 0.9, server
    # uvloop makes an io_uring_enter per new connection where the others make an epoll_ctl; Node does not
    assert "Node's libuv, in this count, still calls `epoll_ctl`" in text
    uvloop, node = counts[("uvloop-protocol", 1)]["calls"], counts[("node-http", 1)]["calls"]
    assert uvloop.get("io_uring_enter", 0) >= 0.9 * uvloop["accept4"] and "io_uring_enter" not in node
    # "Node accepted only some of wrk's connections"
    assert counts[("node-http", 24)]["calls"]["accept4"] < 0.9 * counts[("node-http", 1)]["calls"]["accept4"]


def test_completion_counts_and_memory_as_the_chapter_says() -> None:
    counts = _syscalls("completion.json")
    uring_1 = counts[("uring", 1)]
    entered = uring_1["calls"].get("io_uring_enter", 0) / uring_1["requests"]
    assert entered > 0.99 * uring_1["per_request"]["total"]  # "all of them io_uring_enter"
    for server in ("uring", "uring-multishot"):  # "about one system call per thousand requests"
        assert counts[(server, 24)]["per_request"]["total"] < 0.002, server
    memory = _json("completion.json")["memory"]["results"]
    shared, epoll = memory["uring-multishot"]["bytes_per_connection"], memory["epoll"]["bytes_per_connection"]
    assert abs(shared - epoll) < 0.1 * epoll  # "as in the epoll server"
    assert memory["uring"]["bytes_per_connection"] > 10 * epoll
    sq = _json("completion.json")["sqpoll"]
    assert sq["decision"] == ("uses SQPOLL" if all(r < 1 for r in sq["cpu_ratio"].values()) else "does not use SQPOLL")
