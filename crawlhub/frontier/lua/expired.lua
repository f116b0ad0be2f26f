--! include _now
-- KEYS: inflight, leases; ARGV: max. Returns id, data pairs of leases past their deadline.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_s, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for _, id in ipairs(ids) do
  table.insert(out, id)
  table.insert(out, redis.call('HGET', KEYS[2], id) or '')
end
return out
