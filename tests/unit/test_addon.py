"""Integration: crawlhub as a Scrapy add-on in a project made by `scrapy startproject`."""


from __future__ import annotations


def test_the_addon_layers_defaults_project_environment_and_command_line():
    from scrapy.settings import Settings

    from crawlhub.addon import install

    settings = Settings({"DOWNLOAD_TIMEOUT": 99, "USER_AGENT": "mine/1.0",
                         "DOWNLOADER_MIDDLEWARES": {"myproject.middlewares.Mine": 543}}, priority="project")
    settings.set("MONGO_DATABASE", "from_cmdline", "cmdline")
    overridden = install(settings, environ={"DOMAIN_RATE": "2/s", "MONGO_DATABASE": "from_env", "DOWNLOAD_TIMEOUT": "5"})
    assert settings.getint("MONGO_BATCH_SIZE") == 100, "crawlhub's default"
    assert settings.get("USER_AGENT") == "mine/1.0", "the project's settings.py wins over the defaults"
    assert settings.get("DOMAIN_RATE") == "2/s" and settings.getint("DOWNLOAD_TIMEOUT") == 5, "the environment wins"
    assert settings.get("MONGO_DATABASE") == "from_cmdline", "-s wins over the environment"
    middlewares = settings.getdict("DOWNLOADER_MIDDLEWARES")
    assert middlewares["myproject.middlewares.Mine"] == 543, "the project keeps its own components"
    assert middlewares["crawlhub.downloadermiddlewares.leases.LeaseDownloaderMiddleware"] == 10
    assert middlewares["scrapy.downloadermiddlewares.retry.RetryMiddleware"] is None
    assert settings.get("SCHEDULER") == "crawlhub.frontier.scheduler.RedisScheduler"
    assert sorted(overridden) == ["DOMAIN_RATE", "DOWNLOAD_TIMEOUT", "MONGO_DATABASE"]


def test_crawlhub_exports_the_addon_and_the_base_spider():
    import crawlhub
    from crawlhub.addon import Addon
    from crawlhub.spider import CrawlhubSpider

    assert crawlhub.Addon is Addon and crawlhub.CrawlhubSpider is CrawlhubSpider
