"""Header profiles and proxy pools: the logic, without workers.

The Lua cool-down/escalation script runs against the tests' real Redis.
"""


from __future__ import annotations

import json
import re
import time

import pytest
from scrapy import Request, Spider
from scrapy.exceptions import NotConfigured, UsageError
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawlhub import proxies as px
from crawlhub.browser import browser_settings
from crawlhub.downloadermiddlewares.headers import HeaderProfileMiddleware
from crawlhub.downloadermiddlewares.proxy import ProxyMiddleware
from crawlhub.frontier.serializer import RequestSerializer
from crawlhub.profiles import (
    APPLIED,
    FAMILIES,
    ProfileError,
    family_of,
    fetch_site,
    incoherence,
    load_profiles,
)
from tests.helpers import project_settings

PROFILES = load_profiles()


CHROME = next(p for p in PROFILES if p.family == "chrome" and p.os == "windows")


FIREFOX = next(p for p in PROFILES if p.family == "firefox" and p.os == "linux")


def headers_of(profile, **changes):
    h = dict(profile.headers)
    for k, v in changes.items():
        k = k.replace("_", "-")
        if v is None:
            h.pop(k, None)
        else:
            h[k] = v
    return h


# -- profiles ------------------------------------------------------------------------
def test_bundled_profiles_cover_current_browsers_and_are_coherent():
    combos = {(p.family, p.os) for p in PROFILES}
    for family in ("chrome", "edge", "firefox"):
        assert {(family, o) for o in ("windows", "macos", "linux")} <= combos
    assert ("safari", "macos") in combos
    assert all(incoherence(p.headers) == [] for p in PROFILES)
    assert {p.family for p in PROFILES} == set(FAMILIES)


@pytest.mark.parametrize("changes, problem", [
    ({"Accept": dict(FIREFOX.headers)["Accept"]}, "Accept is not chrome's"),
    ({"sec-ch-ua-platform": '"macOS"'}, "sec-ch-ua-platform"),
    ({"sec-ch-ua": '"Chromium";v="120", "Google Chrome";v="120"'}, "does not match chrome 156"),
    ({"sec-ch-ua": None}, "chrome always sends sec-ch-ua"),
    ({"Sec-Fetch-Mode": "same-site"}, "Sec-Fetch-Mode"),
    ({"Sec-Fetch-Site": "?1"}, "Sec-Fetch-Site '?1'"),
    ({"User-Agent": "Mozilla/5.0 (compatible; pageburst) Chrome/147.0 Safari/537.36"}, "not a known desktop browser"),
])
def test_incoherent_chrome_sets_are_named(changes, problem):
    problems = incoherence(headers_of(CHROME, **changes))
    assert any(problem in p for p in problems), problems


def test_firefox_never_sends_client_hints_or_chromium_accept():
    problems = incoherence({**headers_of(FIREFOX), "sec-ch-ua": '"Chromium";v="156"', "Accept": dict(CHROME.headers)["Accept"]})
    assert "firefox never sends sec-ch-ua" in problems and any("Accept is Chromium's" in p for p in problems)


def test_a_plain_chromium_build_is_coherent():
    ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36"
    h = headers_of(CHROME, User_Agent=ua, sec_ch_ua='"Not:A-Brand";v="8", "Chromium";v="156"', sec_ch_ua_platform='"Linux"')
    assert family_of(ua) == "chrome" and incoherence(h) == []


def test_a_bad_profile_file_is_refused_with_where_and_why(tmp_path):
    bad = tmp_path / "p.json"
    entry = {"id": "x", "family": "chrome", "os": "windows", "version": "156",
             "headers": [list(kv) for kv in headers_of(CHROME, Accept=dict(FIREFOX.headers)["Accept"]).items()]}
    bad.write_text(json.dumps({"profiles": [entry]}))
    with pytest.raises(ProfileError, match=r"profile 0 \(x\): .*Accept is not chrome's"):
        load_profiles(bad)
    entry = {"id": "x", "family": "firefox", "os": "windows", "version": "156", "headers": [list(kv) for kv in CHROME.headers]}
    bad.write_text(json.dumps({"profiles": [entry]}))
    with pytest.raises(ProfileError, match="family 'firefox' but the User-Agent is chrome"):
        load_profiles(bad)
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="p.json"):
        load_profiles(bad)


def test_sec_fetch_site_follows_the_referer():
    assert fetch_site("https://shop.example.co.uk/a", None) == "none"
    assert fetch_site("https://shop.example.co.uk/a", "https://shop.example.co.uk/") == "same-origin"
    assert fetch_site("https://shop.example.co.uk/a", "https://www.example.co.uk/") == "same-site"
    assert fetch_site("https://shop.example.co.uk/a", "https://other.co.uk/") == "cross-site"
    assert fetch_site("https://a.example.com/", "http://a.example.com/") == "cross-site"


def header_mw(**settings):
    crawler = get_crawler(Spider, settings_dict=project_settings(**settings))
    crawler.spider = Spider("t")
    return HeaderProfileMiddleware.from_crawler(crawler)


def test_rotation_gives_whole_profiles_and_keeps_the_spiders_own_headers():
    mw = header_mw()
    uas = set()
    for n in range(60):
        request = Request(f"https://example.com/{n}", headers={"Referer": "https://example.com/", "X-Api": "k"})
        mw.process_request(request)
        sent = {k.decode(): v[0].decode() for k, v in request.headers.items()}
        assert incoherence({k: v for k, v in sent.items() if k not in ("Referer", "X-Api")}) == []
        assert sent["Sec-Fetch-Site"] == "same-origin" and sent["X-Api"] == "k"
        uas.add(sent["User-Agent"])
    assert len(uas) > 5

    own = Request("https://example.com/", headers={"User-Agent": "mybot/1.0"})
    mw.process_request(own)
    assert own.headers["User-Agent"] == b"mybot/1.0" and b"User-Agent" not in own.meta[APPLIED]


def test_a_retry_chooses_again_and_pins_and_opt_outs_work():
    mw = header_mw(HEADER_PROFILES_FAMILIES=["firefox"])
    request = Request("https://example.com/")
    mw.process_request(request)
    assert family_of(request.headers["User-Agent"].decode()) == "firefox"
    # the same request again (a retry through the frontier): the new profile replaces the old whole
    mw.book.profiles = [CHROME]
    mw.process_request(request)
    assert incoherence({k.decode(): v[0].decode() for k, v in request.headers.items()}) == []
    assert request.headers["User-Agent"].decode() == dict(CHROME.headers)["User-Agent"]

    off = Request("https://example.com/", meta={"header_profile": False})
    mw.process_request(off)
    assert not off.headers
    pinned = Request("https://example.com/", meta={"header_profile": "safari-27.0-macos"})
    mw.process_request(pinned)
    assert family_of(pinned.headers["User-Agent"].decode()) == "safari" and b"Sec-Ch-Ua" not in pinned.headers
    browser = Request("https://example.com/", meta={"playwright": True})
    mw.process_request(browser)
    assert not browser.headers, "Chromium sends its own headers for the pages it renders"


def test_a_new_sessions_candidates_rotate_with_the_policy_and_not_past_a_pin():
    """crawlhub.sessions: a new session takes the first candidate no live session has; the candidates are the rotating
    choice and the others in random order, a pin's profile alone, none for Chromium's pages."""
    mw = header_mw()
    request = Request("https://example.com/")
    candidates = [p.id for p in mw.candidates_for(request)]
    assert len(candidates) == len(set(candidates)) == min(16, len(mw.book.profiles))
    assert set(candidates) <= set(mw.book.by_id)
    assert len({tuple(p.id for p in mw.candidates_for(request)) for _ in range(5)}) > 1, "in random order"
    assert [p.id for p in mw.candidates_for(Request("https://example.com/", meta={"header_profile": "safari-27.0-macos"}))
            ] == ["safari-27.0-macos"]
    assert mw.candidates_for(Request("https://example.com/", meta={"playwright": True})) == []
    assert [p.id for p in header_mw(HEADER_PROFILES_POLICY="sticky").candidates_for(request)] != [], "sticky: one"
    assert len(header_mw(HEADER_PROFILES_POLICY="sticky").candidates_for(request)) == 1


def test_profile_settings_are_checked():
    # the middleware's own checks (a crawler built without the add-on, whose start-up checks refuse them first)
    with pytest.raises(NotConfigured, match="HEADER_PROFILES_FAMILIES: unknown"):
        header_mw(HEADER_PROFILES_FAMILIES=["opera"], ADDONS={})
    with pytest.raises(NotConfigured, match="HEADER_PROFILES_PIN 'nope'"):
        header_mw(HEADER_PROFILES_PIN="nope", ADDONS={})
    with pytest.raises(NotConfigured, match="rotate' or 'sticky'"):
        header_mw(HEADER_PROFILES_POLICY="often", ADDONS={})
    for bad, said in (({"HEADER_PROFILES_FAMILIES": ["opera"]}, "HEADER_PROFILES_FAMILIES = ['opera']: unknown opera"),
                      ({"HEADER_PROFILES_PIN": "nope"}, "HEADER_PROFILES_PIN 'nope' is not a profile id"),
                      ({"HEADER_PROFILES_POLICY": "often"}, "HEADER_PROFILES_POLICY = 'often': must be one of rotate")):
        with pytest.raises(UsageError, match=re.escape(said)):
            header_mw(**bad)


# -- proxy pools -------------------------------------------------------------------------
def test_pools_from_settings_and_file_never_show_credentials(tmp_path):
    listed = tmp_path / "proxies.txt"
    listed.write_text("# residential, by country\n"
                      "http://cust-country-de:pw1@gate.example.net:7000 pool=residential country=DE\n"
                      "http://cust-country-us:pw1@gate.example.net:7000 pool=residential country=us\n"
                      "socks5://10.0.0.9:1080 pool=residential name=socks-1\n")
    pools = px.parse_pools({"datacenter": ["http://u:hunter2@10.0.0.1:8080", {"url": "https://10.0.0.2:8443", "name": "dc-b"}]},
                           listed)
    assert list(pools) == ["datacenter", "residential"]
    dc, res = pools["datacenter"], pools["residential"]
    assert dc[0].id.startswith("datacenter/10.0.0.1:8080#") and dc[1].id == "dc-b"
    assert res[0].id != res[1].id and {p.country for p in res[:2]} == {"de", "us"}
    assert not res[2].http and res[2].id == "socks-1"
    for p in [*dc, *res]:
        assert "hunter2" not in repr(p) + str(p) + p.id + json.dumps(p.public()) + p.address
        assert "pw1" not in repr(p) + p.id + json.dumps(p.public())
    assert dc[0].authorization() == b"Basic dTpodW50ZXIy"


@pytest.mark.parametrize("pools, text, message", [
    ({"dc": ["ftp://u:hunter2@h:1"]}, "", r"PROXY_POOLS\['dc'\]\[0\]: scheme 'ftp'"),
    ({"dc": ["http://u:hunter2@host"]}, "", "needs a host and a port"),
    ({"dc": ["http://h:1", "http://h:1"]}, "", "listed twice: dc/h:1"),
    ({}, "http://h:1 colour=blue\n", r"proxies.txt:1: unknown option 'colour'"),
])
def test_bad_proxy_lists_say_where_and_why_without_the_password(tmp_path, pools, text, message):
    listed = tmp_path / "proxies.txt"
    listed.write_text(text)
    with pytest.raises(px.ProxyConfigError, match=message) as err:
        px.parse_pools(pools, listed if text else None)
    assert "hunter2" not in str(err.value)


def test_cooldown_doubles_up_to_the_cap():
    assert [px.cooldown(s, 2, 60, 600) for s in range(1, 7)] == [0, 60, 120, 240, 480, 600]


def proxy_mw(pools, **settings):
    crawler = get_crawler(Spider, settings_dict=project_settings(PROXY_POOLS=pools, **settings))
    return ProxyMiddleware.from_crawler(crawler)


def test_selection_rotates_skips_cooling_and_honours_pool_and_country():
    mw = proxy_mw({"dc": ["http://a:1", "http://b:1", "http://c:1"],
                   "res": [{"url": "http://u:pw@r:1", "country": "de", "name": "r-de"},
                           {"url": "http://r2:1", "name": "r-us", "country": "us"}]})
    picks = [mw.choose(Request(f"https://example.com/{n}")).id for n in range(6)]
    assert picks == ["dc/a:1", "dc/b:1", "dc/c:1"] * 2
    mw.domains["example.com"].cool["dc/b:1"] = time.time() + 60
    mw.dead["dc/c:1"] = time.time() + 60
    assert {mw.choose(Request("https://example.com/x")).id for _ in range(4)} == {"dc/a:1"}
    assert mw.choose(Request("https://example.com/", meta={"proxy_pool": "res", "proxy_country": "US"})).id == "r-us"
    tried = Request("https://example.com/", meta={px.TRIED: ["dc/a:1"], "proxy_pool": "dc"})
    assert mw.choose(tried).id == "dc/a:1", "a proxy already tried is used again only if nothing else is left"
    # the whole tier cooling: the next tier (no Redis here, so only this worker knows)
    mw.domains["example.com"].cool["dc/a:1"] = time.time() + 60
    assert mw.choose(Request("https://example.com/y")).pool == "res"


def test_a_chosen_proxy_is_per_download_and_never_serialized():
    mw = proxy_mw({"dc": ["http://crawler:hunter2@10.0.0.1:8080"]})
    request = Request("https://example.com/", meta={"keep": 1})
    mw.process_request(request)
    assert request.meta["proxy"] == "http://10.0.0.1:8080" and request.headers["Proxy-Authorization"].startswith(b"Basic ")
    payload = RequestSerializer().encode(request)
    assert b"hunter2" not in payload and b"Proxy-Authorization" not in payload and b"10.0.0.1" not in payload
    assert json.loads(payload)["meta"]["keep"] == 1
    browser = Request("https://example.com/", meta={"playwright": True})
    mw.process_request(browser)
    assert browser.meta["playwright_context_kwargs"]["proxy"]["password"] == "hunter2"
    assert b"hunter2" not in RequestSerializer().encode(browser)
    own = Request("https://example.com/", meta={"proxy": "http://mine:3128"})
    mw.process_request(own)
    assert own.meta["proxy"] == "http://mine:3128" and px.PROXY not in own.meta


def test_a_ban_switches_proxy_without_counting_an_attempt():
    mw = proxy_mw({"dc": ["http://a:1", "http://b:1"]})
    request = Request("https://example.com/", meta={"crawlhub_attempts": 1})
    mw.process_request(request)
    first = request.meta[px.PROXY]
    again = mw.banned(request, "HTTP 403")
    assert again.meta[px.TRIED] == [first] and again.meta[px.SWITCHES] == 1 and again.dont_filter
    assert again.meta["crawlhub_attempts"] == 1 and again.meta["crawlhub_same_page"]
    assert "proxy" not in again.meta and b"Proxy-Authorization" not in again.headers
    mw.process_request(again)
    assert again.meta[px.PROXY] != first
    again.meta[px.SWITCHES] = mw.max_switches
    assert mw.banned(again, "HTTP 403") is None, "after PROXY_MAX_SWITCHES the answer is the page's own"


def test_browser_contexts_make_room_for_every_proxy():
    settings = Settings(project_settings(PROXY_POOLS={"dc": [f"http://h{i}:1" for i in range(5)]}, BROWSER_MAX_CONTEXTS=2))
    assert browser_settings(settings)["PLAYWRIGHT_MAX_CONTEXTS"] == 6
    assert browser_settings(Settings(project_settings(BROWSER_MAX_CONTEXTS=2)))["PLAYWRIGHT_MAX_CONTEXTS"] == 2
