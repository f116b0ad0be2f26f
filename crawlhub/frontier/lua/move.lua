--! include _now _ctx _helpers
-- KEYS: the partition's key names (_ctx.lua). ARGV: JSON ctx (spider, lanes), lease id, kind ('queue' | 'list' | 'delay' | 'push'), priority or delay seconds, member, domain ('push')
-- queue: a lease goes back to the front of its domain's queue; push: a new request
-- (a requeued dead letter) to the back; delay: to <spider>:delayed; list: LPUSH (the DLQ)
local ctx = ctx_of(cjson.decode(ARGV[1]))
local id, kind = ARGV[2], ARGV[3]
if kind == 'push' then
  push(ctx, ARGV[6], ARGV[4], ARGV[5], false)
  return 1
end
if redis.call('ZREM', ctx.inflight, id) == 0 then return 0 end
redis.call('HDEL', ctx.leases, id)
release(ctx, id)
local d = domain_of(id) or '?'
if kind == 'queue' then
  push(ctx, d, ARGV[4], ARGV[5], true)
elseif kind == 'delay' then
  redis.call('ZADD', ctx.delayed, ts(now + tonumber(ARGV[4])), d .. '\t' .. ARGV[5])
else
  redis.call('LPUSH', ctx.dlq, ARGV[5])
end
return 1
