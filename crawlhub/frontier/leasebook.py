"""LeaseBook: the leases one worker holds, and when the work of each is done.

A lease is done when its download is over, its callback's output is
exhausted and every item it yielded went through the pipelines. With a store
that acknowledges writes (MongoPipeline), a done lease is *ready*: it ends
after the store's next successful flush, so a page is never forgotten before
its items are written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from scrapy import Request

from crawlhub import meta
from crawlhub.frontier.records import Finish, lease_domain
from crawlhub.frontier.serializer import DecodeError
from crawlhub.roles import split_queue


@dataclass
class Lease:
    id: str
    url: str
    payload: bytes
    priority: int
    outstanding: int = 0  # items yielded and not yet through the pipelines
    downloading: bool = True  # holds one of its domain's concurrency slots
    output_done: bool = False
    error: str | None = None  # the callback raised: the lease ends in the DLQ
    # the request object handed to Scrapy's engine: LeaseWarden's sweep sees when Scrapy is done with it
    request: Request | None = None
    status: int | None = None  # the last answer's status, when one came (response_received)
    # a revisit: what the status store must do once the page's items are stored (crawlhub.revisit.store:
    # the fetch's StatusUpdate, a GoneCheck), judged with the page (crawlhub.signals.page_done) before that
    after_store: list[Any] = field(default_factory=list)
    items: int = 0  # items the page yielded
    invalid: int = 0  # of which quarantined (crawlhub.pipelines.validate.InvalidItem)
    in_engine_since: float = 0.0  # (monotonic) when the warden's sweep first saw its download in Scrapy's engine
    said_long: bool = False  # the sweep said that its download has taken too long
    done_sent: bool = False  # Redis knows the page is over: a renewal marked its lease done (done_unsent)

    @property
    def done(self) -> bool:
        return self.output_done and self.outstanding <= 0


class LeaseBook:
    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}
        self.ready: list[str] = []  # done leases waiting for the store's next flush
        self.wait_for_store = False  # a store acknowledges writes: done leases wait for it
        self.finished: list[Finish] = []  # downloads over: their domains' slots free with the next round trip

    def __len__(self) -> int:
        return len(self._leases)

    def __iter__(self) -> Iterator[Lease]:
        return iter(list(self._leases.values()))

    def __contains__(self, lease_id: object) -> bool:
        return lease_id in self._leases

    def ids(self) -> list[str]:
        return list(self._leases)

    def add(self, lease_id: str, request: Request, payload: bytes) -> Lease:
        request.meta[meta.LEASE] = lease_id
        request.meta[meta.LEASE_PAYLOAD] = payload  # (a reference: the URL status store keeps the request as leased)
        lease = self._leases[lease_id] = Lease(lease_id, request.url, payload, request.priority, request=request)
        return lease

    def take(self, taken: Sequence[tuple[str, bytes]], decode: Callable[[bytes], Request],
             refused: Callable[[str, bytes, str], None]) -> list[Request]:
        """The requests of a round's leases (decoded; a payload that does not decode goes to ``refused``)."""
        requests = []
        for lease_id, payload in taken:
            try:
                request = decode(payload)
            except DecodeError as exc:
                refused(lease_id, payload, str(exc))
                continue
            self.add(lease_id, request, payload)
            requests.append(request)
        return requests

    def get(self, lease_id: str) -> Lease | None:
        return self._leases.get(lease_id)

    def of(self, request: Request | None) -> Lease | None:
        """The lease a request holds (None: not ours, or already ended)."""
        lease_id = request.meta.get(meta.LEASE) if request is not None else None
        return self._leases.get(lease_id) if lease_id else None

    def restore(self, lease: Lease) -> None:
        """Put back a lease taken out to be ended, whose end could not be sent (Redis down): it is renewed again."""
        self._leases[lease.id] = lease

    def pop(self, lease_id: str) -> Lease | None:
        return self._leases.pop(lease_id, None)

    def clear(self) -> None:
        self._leases.clear()

    def done_unsent(self) -> list[str]:
        """Leases whose page is over, waiting for the store's flush, that no renewal has marked so in Redis yet: if
        this worker dies now, their expiry is not held against their pages (RetryPolicy.after_expiry)."""
        return [lease.id for lease in self._leases.values() if lease.done and not lease.done_sent]

    def done_sent(self, lease_ids: Iterable[str]) -> None:
        for lease_id in lease_ids:
            lease = self._leases.get(lease_id)
            if lease is not None:
                lease.done_sent = True

    def held(self) -> dict[str, int]:
        """Domain slots this worker holds (leases still downloading), for its fair share of each domain."""
        # (per domain: a lane's lease holds one of its domain's slots, crawlhub.roles)
        return dict(Counter(split_queue(lease_domain(lease.id))[0] for lease in self._leases.values()
                            if lease.downloading))

    def download_finished(self, lease_id: str, done: Finish | None = None) -> None:
        """A download is over (``done``: sent with the next round trip, freeing its domain's slot)."""
        lease = self._leases.get(lease_id)
        if lease is not None:
            lease.downloading = False
        if done is not None:
            self.finished.append(done)

    def take_finished(self) -> list[Finish]:
        finished, self.finished = self.finished, []
        return finished

    def ended_by(self, request: Request) -> str:
        """The lease a new request ends ('' if none), taking the lease meta out of the request.

        A redirect (or the same page fetched another way, e.g. the browser
        fallback) replaces its lease: the lease ends when the new request is
        queued. Any other request that carries lease meta copied it from its
        parent: it is a new request, and starts without it.
        """
        lease_id = request.meta.pop(meta.LEASE, None)
        if lease_id is None:
            return ""
        lease = self._leases.get(lease_id)
        redirected_from = (request.meta.get("redirect_urls") or [None])[-1]
        same_page = request.meta.pop(meta.SAME_PAGE, False)
        # (SAME_PAGE may name the URL it replaces: a page asked again from the start of its redirects)
        if lease is not None and (redirected_from == lease.url or (same_page and lease.url in (request.url, same_page))):
            del self._leases[lease_id]
            return str(lease_id)
        for key in meta.PARENT_ONLY:
            request.meta.pop(key, None)
        return ""

    # -- a page's output ----------------------------------------------------------------------------
    def item_emitted(self, request: Request | None) -> None:
        lease = self.of(request)
        if lease is not None:
            lease.outstanding += 1
            lease.items += 1

    def item_finished(self, request: Request | None, invalid: bool = False) -> Lease | None:
        """An item went through the pipelines (``invalid``: quarantined): its lease if that made it done."""
        lease = self.of(request)
        if lease is None:
            return None
        lease.outstanding -= 1
        lease.invalid += invalid
        return lease if lease.done else None

    def output_finished(self, request: Request | None, error: BaseException | None = None) -> Lease | None:
        """The callback's output is exhausted (or raised): the lease if that made it done."""
        lease = self.of(request)
        if lease is None:
            return None
        if error is not None and lease.error is None:
            lease.error = f"callback error: {type(error).__name__}: {error}"[:1000]
        if lease.output_done:  # told twice (the spider middleware, then spider_error): it ends once
            return None
        lease.output_done = True
        return lease if lease.done else None

    # -- the store's flushes ------------------------------------------------------------------------
    def take_ready(self) -> list[str]:
        """The done leases a flush that starts now covers."""
        ready, self.ready = self.ready, []
        return ready

    def put_back(self, lease_ids: list[str]) -> None:
        """A flush failed: its leases wait for the next one."""
        self.ready[:0] = lease_ids
