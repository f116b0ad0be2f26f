"""LeaseStoreLink: the store's flush handshake (crawlhub.frontier.view.StoreLink), over the worker's lease book.

With a store that acknowledges writes (MongoPipeline), a done lease is
*ready*: it ends after the store's next successful flush, so a page is never
forgotten before its items are written. A full store buffer stops leasing.
"""

from __future__ import annotations

from collections.abc import Callable

from crawlhub.frontier.leasebook import LeaseBook


class LeaseStoreLink:
    def __init__(self, leases: LeaseBook, finish: Callable[[list[str]], None]):
        self.leases = leases
        self.finish = finish  # the client's: end these leases (their items are stored)
        self.full = False  # the store's buffer is full: take no new requests
        self.on_drained: list[Callable[[], None]] = []  # run when the store's buffer has room again

    def opened(self) -> None:
        self.leases.wait_for_store = True

    def flush_started(self) -> list[str]:
        return self.leases.take_ready()

    def flush_succeeded(self, leases: list[str]) -> None:
        self.finish(leases)

    def flush_failed(self, leases: list[str]) -> None:
        self.leases.put_back(leases)

    def backlog(self, full: bool) -> None:
        self.full = full
        if not full:
            for callback in self.on_drained:
                callback()
