-- wrk script: POST a streaming chat completion of 50 tokens; print one
-- machine-readable RESULT line at the end.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"switchyard-sim-8b","stream":true,"max_tokens":50,"messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Count from one to fifty, one number per token."}]}'

-- WRK_DELAY_MS paces each connection (open-loop-ish rate: connections /
-- (delay + latency)).
local pace = tonumber(os.getenv("WRK_DELAY_MS") or "")
if pace and pace > 0 then
  function delay() return pace end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.status + e.timeout))
end
