-- benchmarks/pipeline.lua
--
-- HTTP/1.1 pipelining for wrk: every write on a connection carries DEPTH
-- requests, and the next write goes out only once all DEPTH answers are in.
-- Japronto's benchmark used this shape (wrk -t1 -c 100, 24 requests per
-- write); benchmarks/loads.py runs it as the ``wrk-pipeline`` load:
--
--     wrk -t1 -c 100 -d 5s --latency -s benchmarks/pipeline.lua http://127.0.0.1:PORT/ -- 24
--
-- Rules this file keeps:
--   * Every request is a plain ``GET <path> HTTP/1.1`` with the Host header
--     wrk takes from the URL, and nothing else: valid for every stage and
--     peer (RFC 9112 section 3.2 makes Host mandatory in HTTP/1.1).
--   * The batch is built once, in init(); request() returns the same string
--     every time, so the Lua side costs wrk almost nothing per batch.
--   * wrk counts the requests in the string that request() returns, and
--     writes the next batch only when that many responses have arrived
--     (its ``pipeline`` count): one batch in flight per connection.
--
-- Arguments after ``--``: DEPTH (default 24), PATH (default the URL's path).
--
-- done() is benchmarks/wrk_json.lua's (the run's figures as JSON), loaded
-- from beside this file: wrk takes one script per run.

dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "wrk_json.lua")

local depth = 24
local batch = nil

init = function(args)
   -- args[0] is the URL; our own arguments follow.
   depth = tonumber(args[1] or "24") or 24
   if depth < 1 then
      error("pipeline.lua: DEPTH must be at least 1, got " .. tostring(args[1]))
   end
   local path = args[2] or wrk.path
   local requests = {}
   for i = 1, depth do
      -- wrk.format(method, path, headers, body) adds Host (and a
      -- Content-Length only when there is a body).
      requests[i] = wrk.format("GET", path)
   end
   batch = table.concat(requests)
end

request = function()
   return batch
end
