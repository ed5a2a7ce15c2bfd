-- benchmarks/wrk_json.lua
--
-- wrk's done() hook: the run's figures as one line of JSON, so that
-- benchmarks/loads.py reads wrk's own numbers instead of parsing its text
-- (whose latencies are rounded to two decimals in a unit wrk picks).
-- benchmarks/loads.py adds ``-s benchmarks/wrk_json.lua`` to every wrk
-- load; benchmarks/pipeline.lua loads this file for its done().
--
-- Rules this file keeps:
--   * It defines done() and nothing else: with no request() or response()
--     of its own, wrk keeps sending its static request, and the script
--     costs nothing per request.
--   * The line starts with MARK, alone on its line after wrk's report;
--     times are in microseconds, as wrk counts them.

local MARK = "tinyloop-wrk-json: "

done = function(summary, latency, requests)
   local errors = summary.errors
   local fields = {
      string.format('"requests": %d', summary.requests),
      string.format('"duration_us": %d', summary.duration),
      string.format('"bytes": %d', summary.bytes),
      string.format('"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}',
                    errors.connect, errors.read, errors.write, errors.status, errors.timeout),
      string.format('"latency_us": {"50": %.1f, "75": %.1f, "90": %.1f, "99": %.1f}',
                    latency:percentile(50), latency:percentile(75), latency:percentile(90),
                    latency:percentile(99)),
   }
   io.write("\n" .. MARK .. "{" .. table.concat(fields, ", ") .. "}\n")
end
