"""URL helpers."""

from __future__ import annotations

from urllib.parse import urlsplit

from w3lib.url import safe_url_string

DEFAULT_PORTS = {"http": 80, "https": 443}


def domain_of(url: str) -> str:
    """The politeness unit of a URL: its host, with the port when it is not the scheme's default. A host that is not
    ASCII (an internationalised domain name) is keyed in its IDNA form, as Scrapy's request URL has it
    (``bücher.example`` -> ``xn--bcher-kva.example``): a limit set on a seed's or a user's spelling applies to the
    requests."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host.isascii():
        host = (urlsplit(safe_url_string(url)).hostname or host).lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port and port != DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return host or "?"
