-- One failure of a proxy on a domain, for the whole cluster, atomically:
-- strikes, cool-down, escalation to the next pool, dead after a streak.
-- ARGV[1]: JSON (health, cool, strikes, domains, tierbans, tier, dead keys; id, pool, next,
-- first, reason, domain, ban_after, base, most, escalate_after, tier_ttl, dead_after).
-- Returns {strikes, cooling until, escalated to, dead until}.
local a = cjson.decode(ARGV[1])
local now = tonumber(redis.call('TIME')[1])
redis.call('HINCRBY', a.health, a.id .. ':fail', 1)
redis.call('HSET', a.health, a.id .. ':error', a.reason)
if tonumber(redis.call('HGET', a.cool, a.id) or '0') > now then
  -- a download that began before the cool-down: counted, but not a new strike
  return {0, '0', '', '0'}
end
local strikes = redis.call('HINCRBY', a.strikes, a.id, 1)
local streak = redis.call('HINCRBY', a.health, a.id .. ':streak', 1)
redis.call('SADD', a.domains, a.domain)
local until_ts, escalated, dead = 0, '', 0
if strikes >= a.ban_after then
  until_ts = now + math.min(a.most, a.base * 2 ^ (strikes - a.ban_after))
  redis.call('HSET', a.cool, a.id, until_ts)
  local bans = redis.call('INCR', a.tierbans)
  redis.call('EXPIRE', a.tierbans, a.tier_ttl)
  local current = redis.call('GET', a.tier) or a.first
  if current == a.pool and bans >= a.escalate_after and a.next ~= '' then
    redis.call('SET', a.tier, a.next, 'EX', a.tier_ttl)
    escalated = a.next
  end
end
if streak >= a.dead_after then
  dead = now + a.most
  redis.call('HSET', a.dead, a.id, dead)
end
return {strikes, tostring(until_ts), escalated, tostring(dead)}
