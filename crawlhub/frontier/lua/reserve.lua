--! include _now _helpers _policy
-- A request that holds no lease takes the domain's next slot.
-- KEYS[1]: the domain's state key (routing); ARGV: domain, politeness config (JSON), ctx (JSON: domain, limits).
-- Returns seconds to wait.
local p = policy(ARGV[1], cjson.decode(ARGV[2]), cjson.decode(ARGV[3]))
local at = math.max(p.ready, now)
take(p, 1)
return string.format('%.3f', at - now)
