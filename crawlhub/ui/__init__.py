"""``crawlhub ui``: the crawl in a browser, live (crawlhub.ui.app)."""
