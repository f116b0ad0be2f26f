--! include _now _helpers _policy
-- One download is over, now (a slow-down must reach the other workers at once).
-- KEYS[1]: the partition's anchor (routing). ARGV: JSON ctx (spider, schedule, domain, factor_max, recovery), domain, lease id or '', outcome, retry-after
local ctx = cjson.decode(ARGV[1])
return tostring(finish(ctx, ARGV[2], ARGV[3], ARGV[4], ARGV[5]))
