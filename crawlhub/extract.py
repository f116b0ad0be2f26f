"""Helpers for a spider's ``parse``: values that real sites put behind their markup.

:func:`page_title`: the document's title, not an inline SVG icon's.

:func:`image_url`: a lazy-loading site (WordPress with WP Rocket or a3 Lazy Load, lazysizes, jQuery lazyload, many
shop themes) puts a placeholder in an image's ``src`` (a ``data:`` URI, or a blank GIF) and the image itself in
``data-lazy-src``, ``data-src``, ``data-original`` or a ``srcset`` of its own; the browser's script swaps them in.
``img::attr(src)`` reads the placeholder: a ``data:`` URI that ValidatePipeline quarantines (an ``image_url`` must
be an http(s) URL), so every item of such a site would be quarantined, or a blank GIF stored as every item's image.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# where an image's URL is, in the order read: the lazy loaders' attributes (the most specific first), then a plain
# image's own; True: a srcset (candidates, each a URL and its width or density)
IMAGE_ATTRIBUTES = (("data-lazy-src", False), ("data-src", False), ("data-original", False), ("data-lazy", False),
                    ("data-echo", False), ("data-lazy-srcset", True), ("data-srcset", True), ("src", False),
                    ("srcset", True))
# what a placeholder's URL starts with (no image of the page's own)
_PLACEHOLDER_SCHEMES = ("data:", "about:", "javascript:", "blob:")
# the document's <title>: an inline SVG icon's (a screen reader's label, in the body) is not
_TITLE = "//title[not(ancestor::svg)]/text()"


def page_title(selector: Any) -> str | None:
    """The document's title (``response`` or a ``Selector``); ``title::text`` reads an inline SVG icon's ``<title>``
    when the page has none of its own, or when the icon comes first."""
    title: str | None = selector.xpath(_TITLE).get()
    return title


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
    product's element, or an ``img``), as written in the page (CleanPipeline makes a type's ``url_fields`` absolute),
    read from :data:`IMAGE_ATTRIBUTES` in their order; a placeholder (``data:``, ``about:blank``...) is passed over,
    and so is an ``img`` that has nothing else (the next one, a ``<noscript>`` copy for instance, is read). None when
    there is none."""
    images: Iterable[Any] = selector.xpath("descendant-or-self::img")
    for img in images:
        attrib = img.attrib
        for name, srcset in IMAGE_ATTRIBUTES:
            value = attrib.get(name)
            if value and (url := _real(first_srcset_url(value) if srcset else value)):
                return url
    return None
