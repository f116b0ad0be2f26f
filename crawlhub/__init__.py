"""crawlhub: a distributed Scrapy crawler on a shared Redis frontier, storing to MongoDB.

``crawlhub.Addon`` puts it into any Scrapy project; ``crawlhub.CrawlhubSpider``
is the base of its spiders.
"""

from pathlib import Path
from typing import Any

__version__ = "0.1.0"
# `scrapy genspider -t crawlhub NAME DOMAIN` with TEMPLATES_DIR = crawlhub.TEMPLATES_DIR
TEMPLATES_DIR = str(Path(__file__).parent / "templates")
__all__ = ["Addon", "CrawlhubSpider", "TEMPLATES_DIR"]


def __getattr__(name: str) -> Any:
    # imported on first use: `import crawlhub` stays cheap and free of import cycles
    if name == "Addon":
        from crawlhub.addon import Addon

        return Addon
    if name == "CrawlhubSpider":
        from crawlhub.spider import CrawlhubSpider

        return CrawlhubSpider
    raise AttributeError(f"module 'crawlhub' has no attribute {name!r}")
