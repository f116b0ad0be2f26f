"""Helpers for a spider's ``parse``: values that real sites put behind their markup.

:func:`image_url`: a lazy-loading site (WordPress with WP Rocket or a3 Lazy Load, lazysizes, jQuery lazyload, many
shop themes) puts a placeholder in an image's ``src`` (a ``data:`` URI, or a blank GIF) and the image itself in
``data-lazy-src``, ``data-src``, ``data-original`` or a ``srcset`` of its own; the browser's script swaps them in.
``img::attr(src)`` reads the placeholder: a ``data:`` URI that ValidatePipeline quarantines (an ``image_url`` must
be an http(s) URL), so every item of such a site would be quarantined, or a blank GIF stored as every item's image.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# where lazy loaders keep an image's URL, the most specific first; a plain image's own ``src`` and ``srcset`` last
LAZY_SRC_ATTRIBUTES = ("data-lazy-src", "data-src", "data-original", "data-lazy", "data-echo")
LAZY_SRCSET_ATTRIBUTES = ("data-lazy-srcset", "data-srcset")
# what a placeholder's URL starts with (no image of the page's own)
_PLACEHOLDER_SCHEMES = ("data:", "about:", "javascript:", "blob:")


def first_srcset_url(srcset: str) -> str | None:
    """The URL of a ``srcset``'s first candidate (``"a.png 350w, b.png 150w"`` -> ``"a.png"``): its first run of
    non-space characters, as the HTML standard reads it, so a comma inside a URL
    (``https://cdn.example/w_300,h_200/a.jpg 300w``) stays in it; a comma that ends the run ends the candidate."""
    first = srcset.split()
    return (first[0].rstrip(",") or None) if first else None


def _real(url: str | None) -> str | None:
    url = (url or "").strip()
    if not url or url.lower().startswith(_PLACEHOLDER_SCHEMES):
        return None
    return url


def image_url(selector: Any) -> str | None:
    """The URL of the first real image at or under ``selector`` (a parsel ``Selector`` or ``SelectorList``: a
    product's element, or an ``img``), as written in the page (CleanPipeline makes a type's ``url_fields`` absolute):
    a lazy loader's attribute first (:data:`LAZY_SRC_ATTRIBUTES`, then :data:`LAZY_SRCSET_ATTRIBUTES`), then
    ``src``, then ``srcset``; a placeholder (``data:``, ``about:blank``...) is passed over, and so is an ``img``
    that has nothing else (the next one, a ``<noscript>`` copy for instance, is read). None when there is none."""
    images: Iterable[Any] = selector.xpath("descendant-or-self::img")
    for img in images:
        attrib = img.attrib
        for name in LAZY_SRC_ATTRIBUTES:
            if url := _real(attrib.get(name)):
                return url
        for name in LAZY_SRCSET_ATTRIBUTES:
            if url := _real(first_srcset_url(attrib.get(name) or "")):
                return url
        if url := _real(attrib.get("src")):
            return url
        if url := _real(first_srcset_url(attrib.get("srcset") or "")):
            return url
    return None
