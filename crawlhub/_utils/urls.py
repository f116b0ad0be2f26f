"""URL helpers."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from w3lib.url import safe_url_string

DEFAULT_PORTS = {"http": 80, "https": 443}
NAME_CHAR = "[^=&;#/?]"  # a character of a query parameter's name


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


class IgnoredParams:
    """Query (and path) parameters that never change what a page is (URL_TRACKING_PARAMS): analytics and ad click
    ids, session ids. ``patterns`` are names or shell-style patterns (``utm_*``: ``*`` any characters of a name,
    ``?`` one), matched regardless of case."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(p.strip() for p in patterns if p and p.strip())
        names = "|".join(re.escape(p).replace(r"\*", NAME_CHAR + "*").replace(r"\?", NAME_CHAR) for p in self.patterns)
        self._name = re.compile(f"(?:{names})", re.IGNORECASE).fullmatch if names else None
        # a URL that may hold one (a look for a name after ? & or ;): most URLs end the work there
        self._maybe = re.compile(f"[?&;](?:{names})(?=[=&;#/?]|$)", re.IGNORECASE).search if names else None

    def __bool__(self) -> bool:
        return self._name is not None

    def ignored(self, name: str) -> bool:
        return self._name is not None and self._name(unquote_plus(name)) is not None

    def strip_url(self, url: str) -> str:
        """``url`` without the ignored parameters: ``?a=1&utm_source=x`` -> ``?a=1``, ``/p;jsessionid=X`` -> ``/p``
        (the rest of the URL as it was, byte for byte); ``url`` itself when it has none."""
        if self._maybe is None or ("%" not in url and self._maybe(url) is None):
            return url
        parts = urlsplit(url)
        query = parts.query
        if query:
            pairs = query.split("&")
            kept = [pair for pair in pairs if not self.ignored(pair.split("=", 1)[0])]
            if len(kept) != len(pairs):
                query = "&".join(kept)
        path = parts.path
        if ";" in path:
            path = "/".join(self._segment(segment) for segment in path.split("/"))
        if query == parts.query and path == parts.path:
            return url
        return urlunsplit(parts._replace(path=path, query=query))

    def _segment(self, segment: str) -> str:
        """A path segment without its ignored ``;name=value`` parameters (a servlet's ``;jsessionid=``)."""
        if ";" not in segment:
            return segment
        head, *params = segment.split(";")
        return ";".join([head, *(p for p in params if not self.ignored(p.split("=", 1)[0]))])
