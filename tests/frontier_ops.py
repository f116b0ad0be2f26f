"""The frontier's scripts with one-step calls for the tests (a worker batches them all into one tick).

``Frontier`` is :class:`crawlhub.frontier.operations.FrontierOps` that also
takes plain tuples for enqueues and finished downloads, and adds
``enqueue``/``lease``/``ack``: conveniences the crawler itself never needs.
"""

from __future__ import annotations

from crawlhub.frontier.keys import Keys
from crawlhub.frontier.operations import FrontierOps
from crawlhub.frontier.records import EnqueueOp, Finish, Tick, lease_domain

__all__ = ["BUDGET_EXHAUSTED", "Frontier", "Keys", "lease_domain"]

BUDGET_EXHAUSTED = object()


class Frontier(FrontierOps):
    def tick(self, enqueues=(), finishes=(), acks=(), n=0, worker="", ttl=60.0, budget=0, workers=1, held=None,
             ahead=0) -> Tick:
        return super().tick([e if isinstance(e, EnqueueOp) else EnqueueOp(*e) for e in enqueues],
                            [f if isinstance(f, Finish) else Finish(*f) for f in finishes],
                            acks, n, worker, ttl, budget, workers, held, ahead=ahead)

    def finish(self, domain, lease_id="", outcome="", retry_after=0.0) -> float:
        done = domain if isinstance(domain, Finish) else Finish(domain, lease_id, outcome, retry_after)
        return super().finish(done)

    def enqueue(self, fp, payload, priority, force=False, ends_lease="", domain="?") -> bool:
        return bool(self.tick([(fp, payload, priority, force, ends_lease, domain)]).added)

    def lease(self, worker, ttl, n=1, budget=0):
        """(leases, wait): leases = [(lease_id, payload)], or BUDGET_EXHAUSTED."""
        result = self.tick(n=n, worker=worker, ttl=ttl, budget=budget)
        if result.budget_exhausted:
            return BUDGET_EXHAUSTED, None
        return result.taken, result.wait

    def ack(self, lease_ids) -> int:
        lease_ids = list(lease_ids)
        return self.tick(acks=lease_ids).acked if lease_ids else 0
