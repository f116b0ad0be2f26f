"""The crawlhub project's Scrapy settings: crawlhub's own spiders on crawlhub's add-on.

Every crawlhub setting, its default and its environment variable come from the
add-on (:mod:`crawlhub.default_settings`, docs/settings.md, generated from it);
any Scrapy project gets the same with ``ADDONS = {"crawlhub.Addon": 0}``.
"""

import crawlhub
from crawlhub.config import apply_env_overrides

BOT_NAME = "crawlhub"
SPIDER_MODULES = ["spiders"]
NEWSPIDER_MODULE = "spiders"
ADDONS = {"crawlhub.Addon": 0}
# read before any add-on runs: `scrapy crawl` checks Redis first; shell, check, parse, fetch
# and view stay off the shared frontier
COMMANDS_MODULE = "crawlhub.commands"
# `scrapy genspider -t crawlhub NAME DOMAIN`
TEMPLATES_DIR = crawlhub.TEMPLATES_DIR

# these too can be set from the environment (e.g. SPIDER_MODULES=spiders,more_spiders)
apply_env_overrides(globals())
