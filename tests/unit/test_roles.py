"""Workers with roles (crawlhub.roles): capabilities, which lane a request goes in, and what status shows."""

from __future__ import annotations

import pytest
from scrapy.http import Request
from scrapy.settings import Settings

from crawlhub import meta
from crawlhub.browser import HANDLER as BROWSER_HANDLER
from crawlhub.frontier.keys import partition_of
from crawlhub.frontier.records import Finish
from crawlhub.impersonate import HANDLER as IMPERSONATE_HANDLER
from crawlhub.roles import Roles, available_rungs, capabilities, format_lanes, lane_backlog, queue_of, split_queue
from spiders.quotes import QuotesSpider
from spiders.quotes_js import QuotesJsSpider
from tests.helpers import project_settings
from tests.unit.test_browser import spider_settings


def test_a_declared_role_runs_its_rungs_handlers_and_no_others():
    plain = spider_settings(QuotesJsSpider, WORKER_CAPABILITIES=["plain"])  # a browser spider, on a plain worker
    assert BROWSER_HANDLER not in plain.getdict("DOWNLOAD_HANDLERS").values(), "a plain worker never starts Chromium"
    assert IMPERSONATE_HANDLER not in plain.getdict("DOWNLOAD_HANDLERS").values()
    assert capabilities(plain) == available_rungs(plain) == ("plain",)
    browser = spider_settings(QuotesSpider, WORKER_CAPABILITIES="browser")  # a plain spider, on a browser worker
    assert browser.getdict("DOWNLOAD_HANDLERS")["https"] == BROWSER_HANDLER
    assert capabilities(browser) == ("browser",) and "browser" in available_rungs(browser)
    default = spider_settings(QuotesJsSpider)
    assert capabilities(default) == available_rungs(default) == ("plain", "impersonate", "browser"), "what it can run"


def test_a_role_the_worker_cannot_run_or_that_is_no_rung_is_refused_with_why():
    with pytest.raises(ValueError, match="WORKER_CAPABILITIES names chromium: .*plain, impersonate, browser"):
        capabilities(Settings(project_settings(WORKER_CAPABILITIES=["chromium"])))
    no_curl = spider_settings(QuotesSpider, WORKER_CAPABILITIES=["plain"], IMPERSONATE_ENABLED=False)
    assert capabilities(no_curl) == ("plain",)
    off = Settings(project_settings(WORKER_CAPABILITIES=["impersonate"], IMPERSONATE_ENABLED=False))
    with pytest.raises(ValueError, match="names impersonate, which this worker cannot run: install crawlhub"):
        capabilities(off)


def test_a_request_goes_in_a_lane_only_when_some_worker_takes_it():
    alone = Roles(["plain", "impersonate"], ["plain", "impersonate"])
    assert alone.lanes == ["", "impersonate", "browser"], "no live worker takes the browser's lane: this one drains it"
    browser_page = Request("https://a.test/", meta={"browser": True})
    assert alone.lane_for(browser_page) == "", "no worker has the browser: downloaded on the highest rung it has"
    assert not alone.reachable("browser") and alone.rungs() == ("plain", "impersonate")
    alone.saw([{"worker": "b", "capabilities": ["browser"]}])
    assert alone.lane_for(browser_page) == "browser" and alone.rungs() == ("plain", "impersonate", "browser")
    assert alone.lanes == ["", "impersonate"], "a browser worker is live: its lane is its own"
    assert alone.lane_for(Request("https://a.test/"), domain_rung="browser") == "browser", "the domain's rung"
    assert alone.lane_for(Request("https://a.test/", meta={"browser": False}), domain_rung="browser") == ""
    assert alone.lane_for(Request("https://a.test/", meta={meta.RUNG: "impersonate"})) == "impersonate"
    assert alone.lane_for(Request("https://a.test/")) == "" and alone.lane_for(
        Request("https://a.test/", meta={meta.RUNG: "plain"})) == ""
    assert alone.lane_for(Request("https://a.test/"), QuotesJsSpider()) == "browser", "a spider with use_browser"
    assert alone.lane_for(Request("https://a.test/", meta={"browser": False}), QuotesJsSpider()) == ""
    assert alone.lane_for(Request("https://a.test/", meta={meta.LANE: "browser"})) == "browser", "moved there"
    alone.saw([])
    assert alone.lane_for(browser_page) == "", "the browser worker left: the page is not left waiting for nobody"
    with pytest.raises(ValueError, match="rung 'gpu' is not one of"):
        alone.lane_for(Request("https://a.test/", meta={meta.RUNG: "gpu"}))
    # a deployment with roles: its workers' lanes wait for the role's workers (KEDA may start them)
    roles = Roles(["plain"], ["plain"], explicit=True)
    assert roles.lane_for(browser_page) == "browser" and roles.lanes == [""]
    assert Roles(["plain", "browser"], explicit=True).lanes == ["", "browser"]


def test_a_lane_is_its_domains_partition_and_politeness():
    assert queue_of("a.test", "browser") == "a.test#browser" and queue_of("a.test") == "a.test"
    assert split_queue("a.test#browser") == ("a.test", "browser") and split_queue("a.test") == ("a.test", "")
    assert all(partition_of(f"shop{i}.test#browser", 48) == partition_of(f"shop{i}.test", 48) for i in range(50))
    assert Finish("a.test#browser", "7@a.test#browser", "").to_lua()["domain"] == "a.test#browser"


def test_status_shows_lane_work_that_no_live_worker_takes():
    queued = {"a.test": 5, "a.test#browser": 3, "b.test#browser": 2, "c.test#impersonate": 0}
    rows = lane_backlog(queued, [{"worker": "w1", "capabilities": ["plain"]}])
    assert rows == [{"lane": "browser", "queued": 5, "domains": 2, "workers": []}]
    assert format_lanes(rows) == ["lane browser: 5 requests queued for 2 domain(s), NO live worker takes it: start one "
                                  "with WORKER_CAPABILITIES=browser"]
    taken = lane_backlog(queued, [{"worker": "w2", "capabilities": ["browser"]}])
    assert taken[1]["workers"] == ["w2"] and "taken by 1 live worker(s)" in format_lanes(taken)[1]
    assert taken[0] == {"lane": "plain", "queued": 5, "domains": 1, "workers": []}, "browser workers alone: say so"
    assert "WORKER_CAPABILITIES=plain" in format_lanes(taken)[0]
