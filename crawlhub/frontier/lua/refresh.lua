--! include _now _ctx _helpers
-- The refresher moves due pages into the frontier, each exactly once per due time.
-- KEYS: the partition's key names (_ctx.lua). ARGV[1]: JSON {ctx (spider, lanes), revisits (hash key), pages: [{fp, due, payload, priority, domain}, ...]}
-- A page is queued (like any request, in its domain's queue, so politeness holds) only if
-- the revisits hash does not already hold this due time, or a later one, for it: a refresher
-- that died after queueing a batch, before marking the store, is not repeated by the next one.
-- Returns the fingerprints queued.
local a = cjson.decode(ARGV[1])
local ctx = ctx_of(a.ctx)
local queued = {}
for _, p in ipairs(a.pages) do
  local due = tonumber(p.due)
  local last = tonumber(redis.call('HGET', a.revisits, p.fp) or '-1')
  if last < due then
    redis.call('HSET', a.revisits, p.fp, string.format('%.17g', due))
    push(ctx, p.domain, p.priority, p.payload, false)
    table.insert(queued, p.fp)
  end
end
return queued
