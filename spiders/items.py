"""The demo project's item types (crawlhub.items documents what an item type declares)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from crawlhub.pipelines.clean import derived_key

__all__ = ["Product", "Quote", "quote_key"]


@dataclass
class Product:
    collection: ClassVar[str] = "products"
    key_fields: ClassVar[tuple[str, ...]] = ("site", "id")
    required: ClassVar[tuple[str, ...]] = ("site", "id", "name", "price", "currency", "url", "source_url")
    url_fields: ClassVar[tuple[str, ...]] = ("url", "image_url", "source_url")
    price_fields: ClassVar[dict[str, str]] = {"price": "currency"}
    host_fields: ClassVar[tuple[str, ...]] = ("site",)

    id: str | None = field(default=None, metadata={"schema": {"type": "string", "minLength": 1, "maxLength": 200}})
    name: str | None = field(default=None, metadata={"schema": {"type": "string", "maxLength": 1000},
                                                     "coverage": 0.9})
    # decimal string, "63.00"; a drop of over half is worth a look (a price scraped wrong, or a real sale)
    price: str | None = field(default=None, metadata={"coverage": 0.9, "alert": {"drop": 0.5}})
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
    derived_keys: ClassVar[dict[str, tuple[str, ...]]] = {"quote_id": ("text", "author")}

    text: str | None = field(default=None, metadata={"coverage": 0.9})
    author: str | None = field(default=None, metadata={"coverage": 0.9})
    author_url: str | None = None  # none on the /js/ pages: an empty field never overwrites a stored one
    tags: list[str] = field(default_factory=list, metadata={"schema": {"type": "array", "items": {"type": "string"}}})
    source_url: str | None = None
    quote_id: str | None = None  # sha1 of text + author, filled by CleanPipeline
    scraped_at: datetime | None = None


def quote_key(text: str | None, author: str | None) -> str:
    """A quote's id: what CleanPipeline derives from its text and author (``derived_keys``)."""
    return derived_key(text, author)
