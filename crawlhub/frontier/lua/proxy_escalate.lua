-- A domain whose tier has no usable proxy moves on (unless another worker moved it already).
-- KEYS: the domain's tier key; ARGV: from pool, to pool, first tier, TTL. Returns the tier now.
local current = redis.call('GET', KEYS[1]) or ARGV[3]
if current ~= ARGV[1] then return current end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[4])
return ARGV[2]
