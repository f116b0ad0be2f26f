--! include _now _helpers
-- KEYS: inflight; ARGV: ttl, spider, lease ids. Returns the ids that are no longer leased.
local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), id)
    local d = domain_of(id)
    if d then redis.call('ZADD', DOMAIN .. d .. ':active', 'XX', now + tonumber(ARGV[1]), ARGV[2] .. '/' .. id) end
  else
    table.insert(lost, id)
  end
end
return lost
