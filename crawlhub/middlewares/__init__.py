"""Downloader middlewares (politeness, robots, headers, proxies, browser) live here."""
