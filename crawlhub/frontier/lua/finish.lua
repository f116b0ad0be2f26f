--! include _now _ctx _helpers _policy
-- One download is over, now (a slow-down must reach the other workers at once).
-- KEYS: the partition's key names (_ctx.lua). ARGV: JSON ctx (spider, factor_max, recovery, lanes), domain, lease id or '', outcome, retry-after
local ctx = ctx_of(cjson.decode(ARGV[1]))
return tostring(finish(ctx, ARGV[2], ARGV[3], ARGV[4], ARGV[5]))
