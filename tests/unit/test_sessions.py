"""Sessions' pieces that need no server: cookies to JSON and back, the status lines, when sessions are on."""

from __future__ import annotations

import http.cookiejar

from scrapy import Spider
from scrapy.http import HtmlResponse, Request
from scrapy.http.cookies import CookieJar
from scrapy.utils.test import get_crawler

from crawlhub.downloadermiddlewares.sessions import sessions_wanted
from crawlhub.sessions import SessionState, cookie_from_json, cookie_to_json, fill_jar, format_sessions, jar_snapshot


def _jar_after(set_cookies: list[str], url: str = "https://shop.example/a/b") -> CookieJar:
    jar = CookieJar()
    request = Request(url)
    response = HtmlResponse(url, headers={"Set-Cookie": set_cookies}, body=b"", request=request)
    jar.extract_cookies(response, request)
    return jar


def test_a_cookie_goes_to_json_and_back_with_every_attribute():
    jar = _jar_after(["sid=abc; Path=/; HttpOnly; Secure; SameSite=Lax", "theme=dark; Max-Age=3600; Domain=shop.example; Path=/"])
    snapshot = jar_snapshot(jar.jar)
    assert set(snapshot) == {"shop.example\t/\tsid", ".shop.example\t/\ttheme"}
    for raw in snapshot.values():
        again = cookie_from_json(raw)
        assert cookie_to_json(again) == raw
    sid = cookie_from_json(snapshot["shop.example\t/\tsid"])
    assert sid.secure and sid.has_nonstandard_attr("HttpOnly") and sid.get_nonstandard_attr("SameSite") == "Lax"
    theme = cookie_from_json(snapshot[".shop.example\t/\ttheme"])
    assert theme.expires is not None and theme.domain_specified


def test_a_jar_filled_from_redis_sends_what_the_site_set_to_the_right_urls():
    source = _jar_after(["sid=abc; Path=/; Secure", "cart=1; Path=/cart"])
    copy = CookieJar()
    fill_jar(copy.jar, {k.encode(): v.encode() for k, v in jar_snapshot(source.jar).items()})
    request = Request("https://shop.example/cart/3")
    copy.add_cookie_header(request)
    assert sorted(request.headers[b"Cookie"].decode().split("; ")) == ["cart=1", "sid=abc"]
    plain = Request("http://shop.example/list")
    copy.add_cookie_header(plain)
    assert b"Cookie" not in plain.headers, "a Secure cookie never goes over http"
    # a value that is not a cookie is left out, the rest kept
    fill_jar(copy.jar, {b"x": b"not json", b"y": jar_snapshot(source.jar)["shop.example\t/\tsid"].encode()})
    assert [c.name for c in copy.jar] == ["sid"]


def test_an_expired_cookie_leaves_the_jar():
    jar = _jar_after(["sid=abc; Path=/"])
    request = Request("https://shop.example/")
    response = HtmlResponse(request.url, headers={"Set-Cookie": "sid=; Max-Age=0; Path=/"}, body=b"", request=request)
    jar.extract_cookies(response, request)
    assert jar_snapshot(jar.jar) == {}
    assert isinstance(next(iter(_jar_after(["a=1"]).jar)), http.cookiejar.Cookie)


def test_status_lines_say_what_the_pool_holds():
    assert format_sessions({}) == []
    lines = format_sessions({"sessions": [{"id": "1-a", "state": "ready"}, {"id": "2-a", "state": "logging"}],
                             "counters": {"created": "2", "logins": "3", "expired": "1", "retired": "0",
                                          "failing": "2", "why": "login failed: HTTP 403"}})
    assert lines[0] == ("sessions: 1 logging, 1 ready; created 2, logins 3, expired 1, retired 0 (banned 0, "
                        "failed logins 0)")
    assert "last retired: login failed: HTTP 403" in lines[1] and "2 in a row" in lines[2]


def test_a_session_state_keeps_fields_it_does_not_know():
    state = SessionState.from_json('{"id": "1-a", "state": "ready", "gen": 2, "bans": 0, "new_field": 1}')
    assert state.gen == 2 and state.extra == {"bans": 0, "new_field": 1}


def test_sessions_are_on_for_a_spider_with_a_login_or_use_sessions():
    class Plain(Spider):
        name = "plain"

    class Login(Spider):
        name = "login"

        async def login(self, session):
            return True

    class Shared(Spider):
        name = "shared"
        use_sessions = True

    assert not sessions_wanted(get_crawler(Plain))
    assert sessions_wanted(get_crawler(Login)) and sessions_wanted(get_crawler(Shared))
    assert sessions_wanted(get_crawler(Plain, {"SESSIONS_ENABLED": True}))
