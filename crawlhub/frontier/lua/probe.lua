-- Whether one partition holds anything queued or delayed (a partition hinted empty whose recheck is due:
-- crawlhub.frontier.partitions): two counts, no lease, no JSON. KEYS: the partition's schedule, its delayed.
return redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2])
