"""Item types: :class:`Page` (any web page) here; a project declares its own (the demo's are in
``spiders/items.py``). Each declares, as class variables, what the pipelines need to know
of it; the pipelines read these through :func:`item_meta` and never name a
concrete type, so a project's own item type works without editing them:

* ``collection``: the MongoDB collection; ``key_fields``: its unique key;
* ``required``: fields that must not be empty (else: quarantine);
* ``url_fields``: made absolute against the item's ``source_url`` (or ``url``),
  and must be http(s) URLs;
* ``price_fields``: price field -> its currency field; the price is parsed
  ("£1,234.5" -> "1234.50", "GBP"; the spider's ``currency`` or
  DEFAULT_CURRENCY when it shows none) and must then be a decimal number, the
  currency an ISO 4217 code;
* ``host_fields``: filled, when empty, with the host of ``source_url`` (or ``url``);
* ``derived_keys``: field -> the fields whose values make it (a SHA-1 of them),
  for items without a natural id.

Each field may declare its contract in its metadata (crawlhub.contracts):
``"schema"`` (JSON Schema of its value), ``"required"``, ``"coverage"`` (the
floor of the share of items that have it) and ``"alert"`` (a change alert
when a stored value moves by more than a share).

Fields default to None so a spider can build an item from whatever it found;
ValidatePipeline decides whether that is enough to store.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, ClassVar


@dataclass
class Page:
    collection: ClassVar[str] = "pages"
    key_fields: ClassVar[tuple[str, ...]] = ("url",)
    required: ClassVar[tuple[str, ...]] = ("url", "status")
    url_fields: ClassVar[tuple[str, ...]] = ("url", "source_url")

    url: str | None = None
    title: str | None = None
    description: str | None = None
    h1: str | None = None
    status: int | None = None
    source_url: str | None = None
    scraped_at: datetime | None = None


# Fields that change on every crawl and so are not part of content_hash.
VOLATILE_FIELDS = ("scraped_at", "source_url")
# what the MongoDB store adds to an item's fields (``crawlhub export`` leaves them out unless asked)
BOOKKEEPING_FIELDS = ("_id", "content_hash", "first_seen", "last_seen", "changed_at", "spiders", "gone_at",
                      "missing_since", "gone_due", "cycles")


def wait_ended(document: dict[str, Any], now: datetime) -> bool:
    """Whether a stored document's wait as missing (``gone_due``, REVISIT_GONE_DELAY) ended by ``now``: it counts as
    gone (an export leaves it out, or carries it gone) before a worker marks it (``gone_at``)."""
    due = document.get("gone_due")
    if not isinstance(due, datetime):
        return False
    return (due if due.tzinfo else due.replace(tzinfo=timezone.utc)) <= now  # pymongo reads naive UTC


def counts_as_gone(document: dict[str, Any], now: datetime) -> bool:
    """Whether a stored document is gone: marked (``gone_at``), or its wait ended (:func:`wait_ended`)."""
    return document.get("gone_at") is not None or wait_ended(document, now)


def is_empty(value: Any) -> bool:
    """A value a spider gives when it did not find the field: a required field so given is missing
    (ValidatePipeline), and it never overwrites a stored value (MongoPipeline)."""
    return value is None or value == "" or (isinstance(value, (list, dict, tuple)) and not value)


def cycle_field(spider: str) -> str:
    """A stored document's field naming the frontier epoch in which ``spider`` last stored it (``cycles.<spider>``,
    a dot or a dollar in the name replaced: MongoDB reads them as a path)."""
    return "cycles." + spider.replace(".", "_").replace("$", "_")


@dataclass(frozen=True)
class ItemMeta:
    """What the pipelines know of an item type (see the module's docstring)."""

    collection: str
    key_fields: tuple[str, ...]
    required: tuple[str, ...]
    url_fields: tuple[str, ...]
    price_fields: tuple[tuple[str, str], ...] = ()  # (price field, currency field)
    host_fields: tuple[str, ...] = ()
    derived_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (field, fields it is made of)
    kind: str = "dict"  # the item type's name, as log lines name it

    def described(self) -> str:
        """How a log line names such an item: "a pages item (Page)", "a dict item for collection 'items'"."""
        if self.kind == "dict":
            return f"a dict item for collection {self.collection!r}"
        return f"a {self.collection} item ({self.kind})"


PAGE_ATTR = "_crawlhub_page"


def mark_page(item: Any, token: int) -> None:
    """Remember which page fetch an item came from (not a field: never stored)."""
    if hasattr(item, "__dict__") and not isinstance(item, dict):
        vars(item)[PAGE_ATTR] = token


def page_of(item: Any) -> int | None:
    """The page fetch ``mark_page`` recorded for the item, or None."""
    return vars(item).get(PAGE_ATTR) if hasattr(item, "__dict__") and not isinstance(item, dict) else None


def item_meta(item: Any) -> ItemMeta:
    """The storage description of an item (dataclass instance or plain dict).

    Plain dicts are stored in a collection named by their ``_collection`` key
    (default "items") keyed by ``url``; typed items are preferred.
    """
    cls = type(item)
    if hasattr(cls, "collection") and hasattr(cls, "key_fields"):
        return _type_meta(cls)  # type: ignore[arg-type]  # (item types are hashable: classes)
    return ItemMeta(item.get("_collection", "items"), ("url",), ("url",), ("url",))


@functools.lru_cache(maxsize=256)
def _type_meta(cls: type[Any]) -> ItemMeta:
    return ItemMeta(
        cls.collection, tuple(cls.key_fields), tuple(getattr(cls, "required", ())), tuple(getattr(cls, "url_fields", ())),
        price_fields=tuple(getattr(cls, "price_fields", {}).items()),
        host_fields=tuple(getattr(cls, "host_fields", ())),
        derived_keys=tuple((name, tuple(parts)) for name, parts in getattr(cls, "derived_keys", {}).items()),
        kind=cls.__name__,
    )
