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

-- wrk reports any answer that is not 2xx or 3xx as "Non-2xx or 3xx responses: N".
done = function(summary, latency, requests)
  io.write(string.format("p50_ms %.2f\np99_ms %.2f\nrps %.0f\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests / (summary.duration / 1e6)))
end
