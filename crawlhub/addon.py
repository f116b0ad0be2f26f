"""crawlhub as a Scrapy add-on: one line puts the shared frontier, the middlewares,
the pipelines and crawlhub's defaults into any Scrapy project::

    # settings.py of any Scrapy project (Scrapy 2.13+)
    ADDONS = {"crawlhub.Addon": 0}
    REDIS_URL = "redis://redis.internal:6379/0"      # or the environment; unset = embedded
    MONGO_URI = "mongodb://mongo.internal:27017/"

What it does, in this order (before the crawler exists, so that a spider's
``from_crawler`` sees them; again after the spider's ``update_settings``):

1. every setting of :mod:`crawlhub.default_settings` at the "addon" priority:
   the project's settings.py and the spider's ``custom_settings`` win over them;
   component dicts (middlewares, pipelines, extensions) are merged entry by
   entry, so a project keeps its own components;
2. the environment: a variable named like one of those settings overrides it
   (read as the default's type), over settings.py but under ``-s``;
3. what follows from the spider class: the browser download handler for
   spiders that render (``use_browser``, ``browser_needs``, ``BROWSER_ENABLED``),
   a certificate-verifying TLS context with ``TLS_VERIFY``, and the spider's
   own ``crawlhub_settings(settings)`` hook (settings that depend on crawlhub's).

:func:`install` does 1 and 2 for code that has settings but no crawler (the
``crawlhub`` command, the demo).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.settings import BaseSettings, Settings

from crawlhub import default_settings
from crawlhub.config import SettingError, apply_env_overrides
from crawlhub.habits import translate
from crawlhub.roles import BROWSER, IMPERSONATE, IMPERSONATE_HANDLER, declared, is_scrapy_handler
from crawlhub.settings_check import check_settings

if TYPE_CHECKING:
    from typing_extensions import Self

# dict settings whose entries are components: merged entry by entry
COMPONENTS = ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS")
# Scrapy's certificate-verifying TLS context (Twisted's recommended one for web clients)
VERIFYING_CONTEXT_FACTORY = "scrapy.core.downloader.contextfactory.BrowserLikeContextFactory"


def defaults() -> dict[str, Any]:
    """crawlhub's settings and their defaults (the upper-case names of crawlhub.default_settings)."""
    return {name: getattr(default_settings, name) for name in dir(default_settings) if name.isupper()}


def install(settings: BaseSettings, environ: Mapping[str, str] | None = None) -> list[str]:
    """crawlhub's defaults at the "addon" priority, then the environment over them; returns the
    names the environment overrode."""
    values = defaults()
    local = not settings.getbool("CRAWLHUB_SHARED", True)  # `scrapy shell/check/parse`: nothing stored
    for name, value in values.items():
        if name in COMPONENTS:
            if local and name == "ITEM_PIPELINES":
                continue
            for path, order in value.items():
                settings[name].set(path, order, "addon")
        else:
            settings.set(name, value, "addon")
    from_env = {name: value for name, value in values.items() if name not in COMPONENTS}
    overridden = apply_env_overrides(from_env, environ)
    for name in overridden:
        settings.set(name, from_env[name], "project")
    settings.set("CRAWLHUB_ENV_OVERRIDES", overridden, "addon")
    # scrapy-redis' settings: honoured, or what cannot be recorded for the worker to refuse (crawlhub.habits)
    settings.set("CRAWLHUB_REFUSED", translate(settings), "addon")
    return overridden


def apply_spider(settings: BaseSettings, spidercls: type[Spider]) -> None:
    """The settings that follow from the spider class and the settings in force."""
    if settings.getbool("TLS_VERIFY"):  # plain downloads verify too (the browser: crawlhub.browser_handler)
        settings.set("DOWNLOADER_CLIENTCONTEXTFACTORY", VERIFYING_CONTEXT_FACTORY, "addon")
    renders = bool(getattr(spidercls, "use_browser", False) or getattr(spidercls, "browser_needs", ())
                   or settings.getbool("BROWSER_ENABLED"))
    roles = declared(settings)  # WORKER_CAPABILITIES: a worker with roles runs the handlers of its rungs, no others
    if roles:
        renders = BROWSER in roles
    if renders:
        from crawlhub.browser import browser_settings

        for name, value in browser_settings(settings).items():
            if name == "DOWNLOAD_HANDLERS":
                for scheme, handler in value.items():
                    settings["DOWNLOAD_HANDLERS"].set(scheme, handler, "spider")
            else:
                settings.set(name, value, "spider")
    if settings.getbool("IMPERSONATE_ENABLED") and (not roles or IMPERSONATE in roles):
        # the impersonate rung in front of Scrapy's own handler (the browser's handler has it inside)
        handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
        for scheme in ("http", "https"):
            if is_scrapy_handler(handlers.get(scheme)):  # (a handler of the project's own is left as it is)
                settings["DOWNLOAD_HANDLERS"].set(scheme, IMPERSONATE_HANDLER, "spider")
    hook = getattr(spidercls, "crawlhub_settings", None)
    if hook is not None:
        hook(settings)


def tool_settings() -> Settings:
    """The project's settings with crawlhub's installed, for code that runs no crawl (the ``crawlhub``
    command, the demo): what a worker of this project would see, less its spider's own."""
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    install(settings)
    return settings


def worker_settings(settings: BaseSettings, spidercls: type[Spider]) -> BaseSettings:
    """A copy of ``settings`` as a worker of ``spidercls`` has them: the spider's own (``custom_settings``,
    scrapy-redis' attributes such as ``redis_key``), then crawlhub's and what follows from the spider."""
    settings = settings.copy()
    spidercls.update_settings(settings)
    install(settings)
    apply_spider(settings, spidercls)
    return settings


def known_spiders(project_settings: BaseSettings) -> list[str]:
    """The project's spiders (Scrapy's spider loader)."""
    from scrapy.spiderloader import get_spider_loader

    return sorted(get_spider_loader(project_settings).list())


def spider_settings(settings: BaseSettings, spider: str) -> BaseSettings:
    """:func:`worker_settings` for the project's spider named ``spider`` (``settings`` themselves for a name the
    project does not have: a spider that left only keys behind). The crawlhub command and the UI read a spider's
    keys (its ``redis_key``...) through it."""
    from scrapy.spiderloader import get_spider_loader

    try:
        spidercls = get_spider_loader(settings).load(spider)
    except KeyError:
        return settings
    return worker_settings(settings, spidercls)


def _install(settings: BaseSettings, refuse: bool = False) -> None:
    from scrapy.exceptions import UsageError

    try:
        install(settings)
    except SettingError as exc:  # a bad environment variable: say which, do not start
        raise UsageError(str(exc)) from None
    refused = settings.getlist("CRAWLHUB_REFUSED")
    # a scrapy-redis setting crawlhub cannot honour: the crawler does not start (the process-wide hook runs
    # before `scrapy crawl` can say it in one line, and the spider's own settings are not in yet)
    if refuse and refused:
        raise UsageError("; ".join(refused))


class Addon:
    """Scrapy add-on: ``ADDONS = {"crawlhub.Addon": 0}`` (see the module's docstring)."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @classmethod
    def update_pre_crawler_settings(cls, settings: BaseSettings) -> None:
        # All of them, not only the pre-crawler ones (TWISTED_REACTOR): Scrapy builds a spider
        # before it calls update_settings, and spiders (scrapy-redis's RedisSpider among them)
        # read their settings in from_crawler.
        _install(settings)

    def update_settings(self, settings: BaseSettings) -> None:
        _install(settings, refuse=True)  # again: a crawler built without a CrawlerProcess skipped the hook above
        spidercls = getattr(self.crawler, "spidercls", None)
        # the spider's and the command line's own in too; before apply_spider reads them, and again after
        # the spider's crawlhub_settings hook had its say
        problems = check_settings(settings)
        if not problems and spidercls is not None:
            apply_spider(settings, spidercls)
            problems = check_settings(settings)
        if problems:
            from scrapy.exceptions import UsageError

            raise UsageError("; ".join(problems))
