--! include _now _ctx _helpers
-- KEYS: the partition's key names (_ctx.lua); ARGV: JSON ctx (spider), ttl, lease ids. Returns the ids that are no longer leased.
-- An id sent as '!' .. id: its page is over and waits for the store's flush (its holder's death would not be the
-- page's doing): a '!' is written after the taken-at time in its record, once (the expired script returns it;
-- crawlhub.frontier.operations.expired_leases reads it as ExpiredLease.done).
local ctx = ctx_of(cjson.decode(ARGV[1]))
local lost = {}
local until_s = deadline_s(now + tonumber(ARGV[2]))
for i = 3, #ARGV do
  local id = ARGV[i]
  local done = string.byte(id) == 33
  if done then id = string.sub(id, 2) end
  if redis.call('ZSCORE', ctx.inflight, id) then
    redis.call('ZADD', ctx.inflight, 'XX', until_s, id)
    local d = domain_of(id)
    if d then redis.call('ZADD', ctx.domain .. host_of(d) .. ':active', 'XX', until_s, ctx.spider .. '/' .. id) end
    if done then
      local record = redis.call('HGET', ctx.leases, id)
      if record then
        local first = string.find(record, '\t', 1, true)
        local second = first and string.find(record, '\t', first + 1, true)
        if second and string.byte(record, second - 1) ~= 33 then
          redis.call('HSET', ctx.leases, id, string.sub(record, 1, second - 1) .. '!' .. string.sub(record, second))
        end
      end
    end
  else
    table.insert(lost, id)
  end
end
return lost
