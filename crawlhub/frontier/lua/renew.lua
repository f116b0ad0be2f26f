--! include _now _ctx _helpers
-- KEYS: the partition's key names (_ctx.lua); ARGV: JSON ctx (spider), ttl, lease ids. Returns the ids that are no longer leased.
local ctx = ctx_of(cjson.decode(ARGV[1]))
local lost = {}
local until_s = deadline_s(now + tonumber(ARGV[2]))
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', ctx.inflight, id) then
    redis.call('ZADD', ctx.inflight, 'XX', until_s, id)
    local d = domain_of(id)
    if d then redis.call('ZADD', ctx.domain .. host_of(d) .. ':active', 'XX', until_s, ctx.spider .. '/' .. id) end
  else
    table.insert(lost, id)
  end
end
return lost
