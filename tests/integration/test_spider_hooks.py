"""Integration: a mistake in a spider's hook is the spider's (#67). crawlhub calls some of a spider's methods from
its middlewares (``session_expired``, ``is_blocked``, ``login``); one that raises is logged as Scrapy logs a
callback's error (an ERROR with the traceback, naming the spider's class, the hook and the URL) and the page goes
to the dead-letter list with a reason that names them too, while the rest of the crawl goes on."""

from __future__ import annotations

import json

from tests.harness import start_worker, wait_all
from tests.sites.hooks import PAGES

SPIDERS = "spiders,tests.sites.hooks"


def _crawl(spider: str, env: dict, site, redis_client, tmp_path, **settings) -> tuple[list[dict], str]:
    shop = site(PAGES)
    redis_client.lpush(f"{spider}:start_urls", f"{shop.url}/")
    worker = start_worker(spider, {**env, "SPIDER_MODULES": SPIDERS, "HOOK_HOME": f"{shop.url}/a"}, tmp_path, spider,
                          **settings)
    wait_all([worker], 120)
    return [json.loads(d) for d in redis_client.lrange(f"{spider}:dlq", 0, -1)], worker.log()


def test_a_session_expired_that_reads_a_redirect_as_text_is_named_in_the_dead_letter(env, site, redis_client, mongo_db,
                                                                                   tmp_path):
    dead, log = _crawl("t_hook_expiry", env, site, redis_client, tmp_path)

    assert [d["url"].rsplit("/", 1)[1] for d in dead] == ["moved"], dead
    assert dead[0]["error"].startswith("spider hook ExpiryReadingSpider.session_expired raised NotSupported: "
                                       "Response content isn't text"), dead
    assert f"ERROR: Spider error in ExpiryReadingSpider.session_expired processing {dead[0]['url']}" in log, log[-4000:]
    assert "Traceback" in log and "response.css" in log, "the spider's own line, in the traceback"
    assert "Error downloading" not in log, "not reported as a download's failure"
    stored = {d["url"].rsplit("/", 1)[1] for d in mongo_db.pages.find()}
    assert stored == {"", "a", "b"}, "the rest of the crawl went on"


def test_an_is_blocked_that_raises_is_named_in_the_dead_letter(env, site, redis_client, mongo_db, tmp_path):
    dead, log = _crawl("t_hook_blocked", env, site, redis_client, tmp_path)

    assert [d["url"].rsplit("/", 1)[1] for d in dead] == ["b"], dead
    assert dead[0]["error"].startswith("spider hook BlockJudgingSpider.is_blocked raised KeyError: 'a bug in the spider'"), dead
    assert f"ERROR: Spider error in BlockJudgingSpider.is_blocked processing {dead[0]['url']}" in log, log[-4000:]
    assert {d["url"].rsplit("/", 1)[1] for d in mongo_db.pages.find()} == {"", "a"}


def test_a_login_that_raises_is_named_in_the_dead_letter(env, site, redis_client, mongo_db, tmp_path):
    dead, log = _crawl("t_hook_login", env, site, redis_client, tmp_path, RETRY_TIMES=1, RETRY_BACKOFF_BASE=0.2)

    assert [d["url"].rsplit("/", 1)[1] for d in dead] == [""], dead
    assert ("login failed: spider hook LoginBugSpider.login raised AttributeError: 'NoneType' object has no "
            "attribute 'strip'") in dead[0]["error"], dead
    assert f"ERROR: Spider error in LoginBugSpider.login processing {dead[0]['url']}" in log, log[-4000:]
    assert mongo_db.pages.count_documents({}) == 0
