"""HeaderProfileMiddleware (395): every request carries one real browser's whole header set.

The profiles (data, coherence checker, capture) are in :mod:`crawlhub.profiles`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Request, Response

from crawlhub import meta
from crawlhub._utils.urls import domain_of
from crawlhub.components import cluster_choice, frontier_of
from crawlhub.profiles import APPLIED, PROFILE_META, STICKY, Profile, ProfileBook, ProfileError, load_profiles

if TYPE_CHECKING:
    from typing_extensions import Self

logger = logging.getLogger(__name__)

class HeaderProfileMiddleware:
    """Gives each request one coherent browser header profile (order 395)."""

    def __init__(self, crawler: Crawler, book: ProfileBook, all_profiles: list[Profile]) -> None:
        self.crawler = crawler
        self.book = book
        self.everything = {p.id: p for p in all_profiles}  # a pin may name any profile of the file
        self.sticky: dict[str, str] = {}
        self.pin = crawler.settings.get("HEADER_PROFILES_PIN") or None
        if self.pin and self.pin not in self.everything:
            raise NotConfigured(f"HEADER_PROFILES_PIN {self.pin!r} is not a profile id; `crawlhub profiles list` shows them")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        if not settings.getbool("HEADER_PROFILES_ENABLED"):
            raise NotConfigured("HEADER_PROFILES_ENABLED is off")
        try:
            everything = load_profiles(settings.get("HEADER_PROFILES_FILE") or None)
        except ProfileError as exc:
            raise NotConfigured(str(exc)) from None
        return cls(crawler, ProfileBook.from_settings(settings, everything), everything)

    def _spider_choice(self) -> Any:
        spider = self.crawler.spider
        return getattr(spider, "header_profile", None) if spider is not None else None

    def profile_for(self, request: Request) -> Profile | None:
        return self._choose(request)[0]

    def candidates_for(self, request: Request, most: int = 16) -> list[Profile]:
        """The profile ``profile_for`` chooses, then, where the choice rotates, up to ``most`` - 1 others in random
        order: a new session takes the first one no live session has (crawlhub.sessions)."""
        first, rotating = self._choose(request)
        if first is None or not rotating:
            return [first] if first is not None else []
        others = [p for p in self.book.profiles if p.id != first.id]
        self.book.rng.shuffle(others)
        return [first, *others[:most - 1]]

    def _choose(self, request: Request) -> tuple[Profile | None, bool]:
        """The request's profile, and whether it was picked at random (the rotate policy)."""
        choice = request.meta.get(PROFILE_META, None)
        if choice is None:
            choice = self._spider_choice()
        if choice is False:
            return None, False
        if request.meta.get("playwright"):
            # Chromium renders it and sends its own headers, coherent by construction;
            # a profile of another browser would not be
            return None, False
        named = choice if isinstance(choice, str) and choice not in ("rotate", "sticky") else self.pin
        if named:
            profile = self.everything.get(named)
            if profile is not None:
                return profile, False
            logger.warning("Unknown header profile %r for %s: picking one instead", named, request.url)
        policy = choice if choice in ("rotate", "sticky") else self.book.policy
        if policy == "rotate":
            return self.book.pick(), True
        # sticky: the same proxy always shows the same browser (per domain without proxies)
        return self._sticky(request.meta.get(meta.PROXY) or domain_of(request.url)), False

    def _sticky(self, key: str) -> Profile:
        chosen = self.sticky.get(key)
        if chosen not in self.book.by_id:  # the first worker to choose decides for the cluster
            frontier = frontier_of(self.crawler)
            chosen = cluster_choice(frontier.server if frontier else None, STICKY, key, self.book.pick().id,
                                    self.book.by_id.__contains__)
            self.sticky[key] = chosen
        return self.book.by_id[chosen]

    def process_request(self, request: Request) -> Request | Response | None:
        for name in request.meta.pop(APPLIED, None) or ():  # a retry: the new attempt chooses again
            request.headers.pop(name, None)
        profile = self.profile_for(request)
        if profile is None:
            return None
        referer = request.headers.get("Referer")
        applied = []
        for name, value in profile.for_request(request.url, referer.decode("latin-1") if referer else None):
            if name in request.headers:
                continue  # the spider set it: its choice
            request.headers[name] = value
            applied.append(name)
        request.meta[APPLIED] = applied
        request.meta[meta.PROFILE] = profile.id
        self.crawler.stats.inc_value(f"profiles/{profile.family}")
        return None
