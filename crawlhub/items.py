"""Item types. Each declares its MongoDB collection, unique key, required
fields and URL fields; pipelines read these through :func:`item_meta`.

Fields default to None so a spider can build an item from whatever it found;
ValidatePipeline decides whether that is enough to store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar


@dataclass
class Product:
    collection: ClassVar[str] = "products"
    key_fields: ClassVar[tuple[str, ...]] = ("site", "id")
    required: ClassVar[tuple[str, ...]] = ("site", "id", "name", "price", "currency", "url", "source_url")
    url_fields: ClassVar[tuple[str, ...]] = ("url", "image_url", "source_url")

    id: str | None = None
    name: str | None = None
    price: str | None = None  # decimal string, "63.00"
    currency: str | None = None  # ISO 4217, "GBP"
    url: str | None = None
    image_url: str | None = None
    source_url: str | None = None  # the listing page it was found on
    site: str | None = None  # host of the shop; filled from source_url if empty
    scraped_at: datetime | None = None


@dataclass
class Quote:
    collection: ClassVar[str] = "quotes"
    key_fields: ClassVar[tuple[str, ...]] = ("quote_id",)
    required: ClassVar[tuple[str, ...]] = ("quote_id", "text", "author", "source_url")
    url_fields: ClassVar[tuple[str, ...]] = ("author_url", "source_url")

    text: str | None = None
    author: str | None = None
    author_url: str | None = None
    tags: list[str] = field(default_factory=list)
    source_url: str | None = None
    quote_id: str | None = None  # sha1 of text + author, filled by CleanPipeline
    scraped_at: datetime | None = None


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


@dataclass(frozen=True)
class ItemMeta:
    collection: str
    key_fields: tuple[str, ...]
    required: tuple[str, ...]
    url_fields: tuple[str, ...]


PAGE_ATTR = "_crawlhub_page"


def mark_page(item, token: int) -> None:
    """Remember which page fetch an item came from (not a field: never stored)."""
    if hasattr(item, "__dict__") and not isinstance(item, dict):
        vars(item)[PAGE_ATTR] = token


def page_of(item) -> int | None:
    """The page fetch ``mark_page`` recorded for the item, or None."""
    return vars(item).get(PAGE_ATTR) if hasattr(item, "__dict__") and not isinstance(item, dict) else None


def item_meta(item) -> ItemMeta:
    """The storage description of an item (dataclass instance or plain dict).

    Plain dicts are stored in a collection named by their ``_collection`` key
    (default "items") keyed by ``url``; typed items are preferred.
    """
    cls = type(item)
    if hasattr(cls, "collection") and hasattr(cls, "key_fields"):
        return ItemMeta(cls.collection, cls.key_fields, cls.required, cls.url_fields)
    return ItemMeta(item.get("_collection", "items"), ("url",), ("url",), ("url",))
