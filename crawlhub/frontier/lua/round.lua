-- The reads a partitioned lease round starts with (crawlhub.frontier.partitions.Partitions._prepare), in one call
-- where one node holds them all: the round's keys grouped under partition 0's tag (crawlhub.frontier.keys), or a
-- plain Redis. Eight commands sent one by one before; a top-level command costs Redis more than the same command
-- in a script. No write.
-- KEYS: epoch, paused, budget, budget used, the hints (<spider>:ready).
-- ARGV: now (a hint's score, whole milliseconds), EMPTY (from it a hint says "empty", asked again at score - EMPTY),
-- EMPTY + now, how many ready hints to read, how many hints "empty" due to read (the scores as text: a Lua number
-- handed to Redis is formatted with "%.17g").
-- Returns {epoch (nil: none), paused (1 or 0), budget (nil), budget used (nil), the ready hints (member, score,
-- ...), the empty ones due (the same), the first hint (member, score; none: no hint), the number of hints}
local ready = KEYS[5]
return {
  redis.call('GET', KEYS[1]),
  redis.call('EXISTS', KEYS[2]),
  redis.call('GET', KEYS[3]),
  redis.call('GET', KEYS[4]),
  redis.call('ZRANGEBYSCORE', ready, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', '0', ARGV[4]),
  redis.call('ZRANGEBYSCORE', ready, ARGV[2], ARGV[3], 'WITHSCORES', 'LIMIT', '0', ARGV[5]),
  redis.call('ZRANGE', ready, '0', '0', 'WITHSCORES'),
  redis.call('ZCARD', ready),
}
