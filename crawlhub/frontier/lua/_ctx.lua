-- A script's ctx: the partition's key names from KEYS, in the order of crawlhub.frontier.operations.CTX_KEYS
-- (KEYS[1], the in-flight set, is the partition's anchor: a cluster client routes by it), into `head`, the
-- decoded JSON of what is not a key (spider, factor_max, recovery, lanes). In KEYS, not JSON: the tick's header
-- decoded in 19.4 us a call with the names, 15.1 without (measured alone, docs/benchmarks.md). The last five
-- (pause, budget, its use, epoch, run-time limits) are there when this partition's script reads them (untagged;
-- one grouped partition all but the limits); missing, nil here.
local function ctx_of(head)
  local k = KEYS
  local ctx = head or {}
  ctx.inflight, ctx.prefix, ctx.schedule, ctx.counts, ctx.leases, ctx.seq = k[1], k[2], k[3], k[4], k[5], k[6]
  ctx.delayed, ctx.dlq, ctx.seen, ctx.known, ctx.domain = k[7], k[8], k[9], k[10], k[11]
  ctx.paused, ctx.budget, ctx.budget_used, ctx.epoch, ctx.limits = k[12], k[13], k[14], k[15], k[16]
  return ctx
end
