"""crawlhub's exceptions that cross layers (a pipeline raises, the frontier's warden counts)."""

from __future__ import annotations

from scrapy.exceptions import DropItem, IgnoreRequest


class InvalidItem(DropItem):
    """An item that failed validation; ``reasons`` says why, ``fields`` the same per field ("" = the item)."""

    def __init__(self, reasons: list[str], fields: dict[str, list[str]] | None = None) -> None:
        self.reasons = reasons
        self.fields = fields if fields is not None else {"": list(reasons)}
        super().__init__("invalid item, quarantined: " + "; ".join(reasons), log_level="WARNING")


class DeadLettered(IgnoreRequest):
    """A download failed for good and its request is in the dead-letter list (the message says why)."""
