"""A site whose pages are listed in sitemaps: robots.txt -> a sitemap index -> two gzipped sitemaps with lastmod."""

from __future__ import annotations

import gzip


def _urlset(base: str, entries: dict[str, str]) -> bytes:
    urls = "".join(f"<url><loc>{base}{path}</loc><lastmod>{lastmod}</lastmod></url>" for path, lastmod in entries.items())
    xml = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
    return gzip.compress(xml.encode(), mtime=0)


def sitemap_site(base: str, lastmods: dict[str, str], split: int = 5) -> dict:
    """Pages: /robots.txt, /sitemap_index.xml, /sitemap1.xml.gz, /sitemap2.xml.gz (``lastmods``: product path ->
    W3C date, the first ``split`` in sitemap 1), every product page, and /product/unlisted/ that no sitemap lists."""
    paths = list(lastmods)
    parts = {"/sitemap1.xml.gz": paths[:split], "/sitemap2.xml.gz": paths[split:]}
    index = "".join(f"<sitemap><loc>{base}{name}</loc><lastmod>{max(lastmods[p] for p in part)}</lastmod></sitemap>"
                    for name, part in parts.items())
    pages: dict = {
        "/robots.txt": (200, "text/plain", f"User-agent: *\nAllow: /\nSitemap: {base}/sitemap_index.xml\n", {}),
        "/sitemap_index.xml": (200, "application/xml", '<?xml version="1.0" encoding="UTF-8"?><sitemapindex '
                               f'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{index}</sitemapindex>', {}),
    }
    for name, part in parts.items():
        pages[name] = (200, "application/x-gzip", _urlset(base, {p: lastmods[p] for p in part}), {})
    for path in [*paths, "/product/unlisted/"]:
        pages[path] = f"<html><head><title>{path}</title></head><body>{path}</body></html>"
    return pages
