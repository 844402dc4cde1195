-- wrk script: POST one JSON body to one path with a bearer token.
-- Environment: BENCH_PATH, BENCH_BODY, BENCH_TOKEN (empty for none).
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH")
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
local token = os.getenv("BENCH_TOKEN")
if token and token ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. token
end

local statuses = {}
response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

done = function(summary, latency, requests)
  for status, n in pairs(statuses) do
    io.write(string.format("status %d: %d\n", status, n))
  end
  io.write(string.format("p50_ms %.2f\np99_ms %.2f\nrps %.0f\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests / (summary.duration / 1e6)))
end
