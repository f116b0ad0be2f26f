-- Whether a partition holds anything queued or delayed (a partition hinted empty whose recheck is due:
-- crawlhub.frontier.partitions; a worker's pending check in one partition): no lease, no JSON.
-- KEYS: schedules (the domains' own, and their lanes': crawlhub.roles) and the delayed set. Returns the sum of their sizes.
local n = 0
for _, key in ipairs(KEYS) do n = n + redis.call('ZCARD', key) end
return n
