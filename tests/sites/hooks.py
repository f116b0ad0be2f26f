"""Spiders whose hooks have a mistake in them (SPIDER_MODULES=spiders,tests.sites.hooks), and their site.

The site's ``/moved`` answers a redirect whose answer is not text (as some servers send one: a binary type and
body): a hook that reads it with ``response.css`` raises Scrapy's NotSupported.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from crawlhub.items import Page
from crawlhub.spider import CrawlhubSpider

PAGES = {
    "/": '<title>home</title><a href="/a">a</a> <a href="/moved">moved</a> <a href="/b">b</a>',
    "/a": "<title>a</title>",
    "/b": "<title>b</title>",
    "/moved": (302, "application/octet-stream", b"\x00\x01\x02\x03", {"Location": "/a"}),
}


class _Pages(CrawlhubSpider):
    def parse(self, response):
        yield Page(url=response.url, title=response.css("title::text").get(), status=response.status,
                   source_url=response.url)
        yield from self.follow_links(response, response.css("a::attr(href)").getall())


class ExpiryReadingSpider(_Pages):
    """Reads every answer's text to tell an ended session: a redirect's answer has none."""

    name = "t_hook_expiry"
    use_sessions = True

    def session_expired(self, response):
        return bool(response.css("form#login"))


class BlockJudgingSpider(_Pages):
    """Its is_blocked has a bug on one page (no sessions: the ladder asks it)."""

    name = "t_hook_blocked"

    def is_blocked(self, response):
        if urlsplit(response.url).path == "/b":
            raise KeyError("a bug in the spider")
        return False


class LoginBugSpider(_Pages):
    """Its login reads a line the site's page does not have."""

    name = "t_hook_login"

    async def login(self, session):
        page = await session.get(os.environ["HOOK_HOME"])
        return page.css("p.user::text").get().strip() == "alice"  # no p.user: None.strip()
