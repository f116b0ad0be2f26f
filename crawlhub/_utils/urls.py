"""URL helpers."""

from __future__ import annotations

from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def domain_of(url: str) -> str:
    """The politeness unit of a URL: its host, with the port when it is not the scheme's default."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port and port != DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{port}"
    return host or "?"
