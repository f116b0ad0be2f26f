-- The hints of a partitioned frontier (<spider>:ready: partition -> score), kept so that a worker
-- with nothing to do asks Redis one key, not every partition (crawlhub.frontier.partitions).
-- KEYS[1]: the hint zset. ARGV: groups of 4: partition, expected score ('' = must be absent),
-- new score, mode:
--   'set'  an observation (a lease round's tick of that partition): written only if the hint is
--          still the one the round read before its tick (else a later write came in between: kept)
--   'add'  the same, by a round that also queued requests there: if the hint moved meanwhile, it
--          is lowered to the new score instead (min), never raised over work that round added
--   'mark' work was added (links, a requeue, a retry due then): the hint is lowered to the new
--          score, and moved even when it is already lower, so that a round that read the old
--          hint before the work came cannot write "empty" over it
-- A score is a time in whole milliseconds (crawlhub.frontier.partitions.hint_ms: integral scores cost Redis no
-- "%.17g"); one at or above EMPTY (1e13: far beyond any time) says "nothing queued or delayed", to be
-- asked again at score - EMPTY (a safety net for a mark lost with a killed worker). A score is written as the
-- text it came in (a Lua number would be formatted with "%.17g" on its way to ZADD).
-- Returns the number of hints written.
local written = 0
for i = 1, #ARGV, 4 do
  local member, expected, text, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local score = tonumber(text)
  local current = redis.call('ZSCORE', KEYS[1], member)
  if current then current = tonumber(current) else current = nil end  -- (a missing member is false)
  local new = nil
  if mode == 'mark' then
    -- (moved a millisecond earlier)
    if current == nil or score < current then new = text else new = string.format('%d', current - 1) end
  elseif (expected == '' and current == nil) or (expected ~= '' and current == tonumber(expected)) then
    new = text
  elseif mode == 'add' then
    if current == nil or score < current then new = text end
  end
  if new ~= nil then
    redis.call('ZADD', KEYS[1], new, member)
    written = written + 1
  end
end
return written
