"""Sessions shared by the cluster (#31): cookies in Redis that any worker continues, a login once per session.

The sites (tests.sites.members) count at the server what the checks need: the session cookies they issued
(each one a login), and every page request with the session cookie it carried.
"""

from __future__ import annotations

import json
from collections import Counter

from crawlhub.frontier.scripts import Script
from crawlhub.ladder import read_ladder
from crawlhub.sessions import SCRIPT, cookies_key, pool_key, stats_key
from tests.harness import cli, start_worker, wait_all, wait_for, worker_records
from tests.sites.fingerprint import BROWSERS
from tests.sites.members import MembersSite, VisitorSite
from tests.sites.server import LocalProxy

SPIDERS = "spiders,tests.sites.spiders"


def _counters(redis_client, spider: str) -> dict[str, int]:
    raw = redis_client.hgetall(stats_key(spider))
    return {k.decode(): int(float(v)) for k, v in raw.items() if k != b"why"}


def _crawl(spider: str, env: dict, redis_client, tmp_path, seed: str, workers: int = 3, **settings) -> list:
    """``workers`` workers join, then the seed goes in (so that every one of them takes part)."""
    started = [start_worker(spider, env, tmp_path, f"{spider}-{i}", MAX_IDLE_TIME_BEFORE_CLOSE=8, **settings)
               for i in range(workers)]
    assert wait_for(lambda: len(worker_records(redis_client, spider)) == workers, 60), "the workers joined"
    redis_client.lpush(f"{spider}:start_urls", seed)
    wait_all(started, 180)
    return started


def test_a_cookie_the_first_page_hands_out_goes_with_every_page_in_every_worker(env, site, redis_client, mongo_db,
                                                                                 tmp_path):
    """HTTPS; the home page sets the cookie, every other page answers 403 without it. The spider's login visits
    the home page: once per session (sessions end after 15 uses, so several start), and no page goes out without
    its session's cookie, whichever worker sends it."""
    visitors = VisitorSite(pages=60)
    shop = site({}, handler=visitors, tls=True, delay=0.2)
    env = {**env, "SPIDER_MODULES": SPIDERS, "VISITORS_HOME": f"{shop.url}/"}
    workers = _crawl("t_visitors", env, redis_client, tmp_path, f"{shop.url}/list/0", SESSION_POOL_SIZE=2,
                     SESSION_MAX_USES=15, CONCURRENT_REQUESTS=2)

    assert visitors.invalid_hits() == [], "every page went out inside a valid session"
    assert len(mongo_db.pages.distinct("url")) == mongo_db.pages.count_documents({}) == 66
    assert redis_client.llen("t_visitors:dlq") == 0
    counters = _counters(redis_client, "t_visitors")
    # one first visit per session, counted at the server: not one per worker, not one per page
    assert len(visitors.issued) == counters["created"] == counters["logins"], (visitors.issued, counters)
    assert counters["created"] >= 66 // 15, "sessions end after their uses and new ones start"
    per_session = Counter(h.session for h in visitors.hits)
    assert set(per_session) <= set(visitors.issued) and max(per_session.values()) <= 15, per_session
    busy = [r for r in worker_records(redis_client, "t_visitors") if r["pages"] > 0]
    assert len(busy) >= 2, "the sessions were continued by more than one worker"
    logs = "".join(w.log() for w in workers)
    assert "Session 1-" in logs and " logged in (login 1 of it)" in logs
    # nothing of the session reached Scrapy's per-worker jar: no cookie went out but the session's
    assert all(h.session for h in visitors.hits)
    status = cli(env, "status", "t_visitors")
    assert f"created {counters['created']}, logins {counters['logins']}" in status.stdout, status.stdout
    # a reset takes the sessions with the crawl (a worker's copy of one is never reused: the ids carry their time)
    assert cli(env, "reset", "t_visitors", "--yes").returncode == 0
    assert not list(redis_client.scan_iter("t_visitors:{t_visitors}:sessions*"))


def test_a_login_with_a_csrf_token_runs_once_per_session_and_again_when_the_site_ends_it(env, site, redis_client,
                                                                                         mongo_db, tmp_path):
    """3 workers, 2 sessions: 2 logins (not 3, not one per page); the site logs everybody out mid-crawl; each
    session logs in once again, and the pages sent to the login form meanwhile are fetched again inside it."""
    members = MembersSite(pages=80, expire_after=30)
    shop = site({}, handler=members, delay=0.3)  # (slow enough that every worker finds work: 13 s for one alone)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MEMBERS_LOGIN_URL": f"{shop.url}/login",
           "MEMBERS_USER": "alice", "MEMBERS_PASSWORD": "s3cret"}
    workers = _crawl("t_members", env, redis_client, tmp_path, f"{shop.url}/list/0", SESSION_POOL_SIZE=2,
                     SESSION_MAX_USES=0, CONCURRENT_REQUESTS=2)

    stored = list(mongo_db.pages.find({}, {"url": 1, "h1": 1}))
    assert len(stored) == len({d["url"] for d in stored}) == 88
    assert all(d["h1"] == "alice" for d in stored), "every stored page was served to a logged-in member"
    assert not [d for d in stored if "/login" in d["url"]]
    assert redis_client.llen("t_members:dlq") == 0, redis_client.lrange("t_members:dlq", 0, -1)
    assert members.expired_at, "the site logged everybody out mid-crawl"
    counters = _counters(redis_client, "t_members")
    assert counters["created"] == 2
    assert counters["expired"] == 2, "each session found out it had ended, once"
    assert len(members.issued) == counters["logins"] == 4, (members.issued, counters)
    assert members.login_forms == 4 and members.failed_logins == 0
    assert members.sent_to_login >= 1, "pages went out as the site ended the sessions (and were stored all the same)"
    before = [h for h in members.hits if h.at < members.expired_at]
    after = [h for h in members.hits if h.at >= members.expired_at]
    assert before and all(h.valid for h in before), "no page went out without a live session before the site ended them"
    assert len({h.session for h in before}) == 2, "the pages went out in both sessions of the pool"
    assert all(h.session in members.issued for h in after), "a page went out with no session cookie"
    assert not any(h.valid for h in after if h.session in members.issued[:2]), "old sessions do not come back"
    assert len([r for r in worker_records(redis_client, "t_members") if r["pages"] > 0]) >= 2
    logs = "".join(w.log() for w in workers)
    assert "expired (the members' page sent us to the login form" in logs
    # the password is the environment's: never in Redis, never in a log
    assert "s3cret" not in logs
    assert all(b"s3cret" not in (redis_client.dump(k) or b"") for k in redis_client.scan_iter("*"))


def test_a_login_that_fails_ends_its_pages_in_the_dead_letter_list_with_the_reason(env, site, redis_client,
                                                                                    mongo_db, tmp_path):
    """A wrong password: the logins fail, the pages go back as retries and then to the dead-letter list with
    the reason; nothing is stored, and the logins stop (SESSION_LOGIN_FAILURES) instead of going on forever."""
    members = MembersSite(pages=5)
    shop = site({}, handler=members)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MEMBERS_LOGIN_URL": f"{shop.url}/login",
           "MEMBERS_USER": "alice", "MEMBERS_PASSWORD": "wrong", "RETRY_TIMES": "1", "RETRY_BACKOFF_BASE": "0.2"}
    _crawl("t_members", env, redis_client, tmp_path, f"{shop.url}/list/0", workers=1, SESSION_POOL_SIZE=2)

    dead = [json.loads(d) for d in redis_client.lrange("t_members:dlq", 0, -1)]
    assert [d["url"] for d in dead] == [f"{shop.url}/list/0"], dead
    assert "login failed" in dead[0]["error"] and "the spider's login returned False" in dead[0]["error"], dead
    assert mongo_db.pages.count_documents({}) == 0
    assert members.hits == [], "no page went out without its login"
    assert members.failed_logins == _counters(redis_client, "t_members")["login_failures"]
    # SESSION_LOGIN_FAILURES (3) in a row, then one try per SESSION_LOGIN_TIMEOUT: the retry does not log in again
    assert members.failed_logins == 3, "the logins stop after SESSION_LOGIN_FAILURES in a row"


def test_a_worker_killed_in_the_middle_of_a_login_holds_nothing(env, site, redis_client, mongo_db, tmp_path):
    """kill -9 while the site answers its login: the session's claim lapses after SESSION_LOGIN_TIMEOUT, another
    worker logs the same session in (not a new one) and the crawl ends with every page stored once."""
    members = MembersSite(pages=20, slow_logins=1, login_delay=3.0)
    shop = site({}, handler=members)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MEMBERS_LOGIN_URL": f"{shop.url}/login", "MEMBERS_USER": "alice",
           "MEMBERS_PASSWORD": "s3cret", "SESSION_POOL_SIZE": "1", "SESSION_LOGIN_TIMEOUT": "4", "LEASE_TTL": "3",
           "LEASE_RECLAIM_INTERVAL": "1"}
    first = start_worker("t_members", env, tmp_path, "first")
    redis_client.lpush("t_members:start_urls", f"{shop.url}/list/0")
    assert wait_for(lambda: members.login_posts == 1, 60), "the first worker is logging in"
    first.kill()  # SIGKILL in the middle of the login: its claim on the session is all that is left of it
    second = start_worker("t_members", env, tmp_path, "second")
    wait_all([second], 120)

    stored = list(mongo_db.pages.find({}, {"url": 1, "h1": 1}))
    assert len(stored) == len({d["url"] for d in stored}) == 22 and all(d["h1"] == "alice" for d in stored)
    assert redis_client.llen("t_members:dlq") == 0
    counters = _counters(redis_client, "t_members")
    assert counters["created"] == 1, "the dead worker's session was taken over, not replaced"
    assert counters["logins"] == 1 and members.login_posts == 2
    # the site finished the dead worker's login too (to a closed connection): the pages went out in the second's
    assert len(members.issued) == 2 and {h.session for h in members.hits} == {members.issued[1]}
    assert "logged in (login 1 of it)" in second.log()


def test_sessions_and_the_ladder_on_a_site_that_checks_the_tls_fingerprint(env, site, redis_client, mongo_db,
                                                                           tmp_path):
    """HTTPS, a login form, and a 403 for any ClientHello that is not a browser's: the login climbs to the
    impersonate rung with its form (the form is sent there, once), the pages climb with the domain, and a block
    the ladder climbs from does not end the session: two sessions, two logins, every page stored logged in."""
    members = MembersSite(pages=30)
    shop = site({}, handler=members, tls=True, fingerprints=BROWSERS)
    env = {**env, "SPIDER_MODULES": SPIDERS, "MEMBERS_LOGIN_URL": f"{shop.url}/login", "MEMBERS_USER": "alice",
           "MEMBERS_PASSWORD": "s3cret", "HEADER_PROFILES_FAMILIES": "chrome"}
    _crawl("t_members", env, redis_client, tmp_path, f"{shop.url}/list/0", workers=2, SESSION_POOL_SIZE=2)

    stored = list(mongo_db.pages.find({}, {"url": 1, "h1": 1}))
    assert len(stored) == len({d["url"] for d in stored}) == 33 and all(d["h1"] == "alice" for d in stored)
    assert redis_client.llen("t_members:dlq") == 0
    assert read_ladder(redis_client)[f"127.0.0.1:{shop.port}"]["rung"] == "impersonate"
    counters = _counters(redis_client, "t_members")
    assert counters["created"] == counters["logins"] == len(members.issued) == 2, (counters, members.issued)
    assert members.failed_logins == 0 and members.login_posts == 2, "each form was sent once, on the rung that passes"
    assert members.hits and all(h.valid for h in members.hits)
    blocked = [h for h in shop.hits if h.status == 403]
    assert blocked and all(h.ja4 not in BROWSERS for h in blocked)
    assert all(h.ja4 in BROWSERS for h in shop.hits if h.status != 403)


def test_a_session_keeps_its_proxy_and_its_browser_profile_on_every_worker(env, site, redis_client, mongo_db,
                                                                           tmp_path):
    """Two proxies, header profiles rotating per request: each session's requests (counted at the site by the
    session's cookie) all came through one proxy (its Via) with one browser's headers (its User-Agent), whichever
    of the two workers sent them."""
    visitors = VisitorSite(pages=40)
    shop = site({}, handler=visitors, delay=0.2)
    proxies = [LocalProxy(name, credentials="crawler:pw").start() for name in ("p1", "p2")]
    try:
        env = {**env, "SPIDER_MODULES": SPIDERS, "VISITORS_HOME": f"{shop.url}/",
               "PROXY_POOLS": json.dumps({"dc": [p.url() for p in proxies]}), "HEADER_PROFILES_POLICY": "rotate"}
        _crawl("t_visitors", env, redis_client, tmp_path, f"{shop.url}/list/0", workers=2, SESSION_POOL_SIZE=3,
               SESSION_MAX_USES=0, CONCURRENT_REQUESTS=2)
    finally:
        for p in proxies:
            p.stop()
    assert mongo_db.pages.count_documents({}) == 44 and visitors.invalid_hits() == []
    seen: dict[str, set] = {}
    for hit in shop.hits:
        headers = dict(hit.headers)
        cookie = headers.get("Cookie", "")
        if "visitor=" in cookie:
            seen.setdefault(cookie, set()).add((headers.get("Via"), headers.get("User-Agent")))
    assert len(seen) == len(visitors.issued) == 3, seen
    assert all(len(pairs) == 1 for pairs in seen.values()), seen
    assert all(via in ("1.1 p1", "1.1 p2") and ua for pairs in seen.values() for via, ua in pairs), seen
    assert len({ua for pairs in seen.values() for _, ua in pairs}) > 1, "the sessions have profiles of their own"


def test_a_new_session_takes_the_first_profile_no_live_session_has(redis_client):
    """The pool op's profiles (ids one a line, the worker's random choice first): a new session shows a browser of its
    own while one is left, whichever worker made the others; else the worker's choice."""
    script = Script(redis_client, SCRIPT)

    def new(profiles: str) -> str:
        created, live = script([pool_key("t"), stats_key("t"), cookies_key("t", "-")],
                               ["pool", "1000", "4", "0", "0", "ready", "p1", profiles])
        return {json.loads(s)["id"]: json.loads(s)["profile"] for s in live}[created.decode()]

    assert new("chrome-1\nfirefox-2\nsafari-3") == "chrome-1"
    assert new("chrome-1\nfirefox-2\nsafari-3") == "firefox-2", "chrome-1 is taken: the next candidate"
    assert new("firefox-2\nchrome-1") == "firefox-2", "every candidate taken: the worker's choice"
    assert new("") == "", "no profile (profiles off, a browser request)"


def test_the_session_script(redis_client):
    """The Lua script's rules, one op at a time."""
    script = Script(redis_client, SCRIPT)
    keys = [pool_key("s"), stats_key("s")]

    def call(op, *args, sid="-"):
        return script([*keys, cookies_key("s", sid)], [op, "1000", *args])

    created, live = call("pool", "2", "100", "3", "login", "p1", "chrome-1")
    assert created == b"1-f4240" and len(live) == 1 and json.loads(live[0])["state"] == "login"  # (time 1000 s)
    created, live = call("pool", "2", "100", "3", "login", "p2", "chrome-2")
    assert created == b"2-f4240" and len(live) == 2
    created, live = call("pool", "2", "100", "3", "login", "p3", "chrome-3")
    assert created == b"" and len(live) == 2, "the pool is full"
    # one claim of a login wins; it ends with a new generation
    assert int(call("claim", "1-f4240", "w1", "60", sid="1-f4240")[1]) == 1
    assert int(call("claim", "1-f4240", "w2", "60", sid="1-f4240")[1]) == 0
    raw, _ = call("logged", "1-f4240", "w1", "1", "", sid="1-f4240")
    assert json.loads(raw)["state"] == "ready" and json.loads(raw)["gen"] == 1
    # cookies: each write a new version; a use returns them when the caller's version is old
    assert call("cookies", "1-f4240", json.dumps({"a\t/\tk": '{"v": 1}'}), "[]", "0", sid="1-f4240") == 1
    raw, cookies = call("use", "1-f4240", "0", "100", "3", "1", sid="1-f4240")
    assert json.loads(raw)["uses"] == 1 and cookies == [b"a\t/\tk", b'{"v": 1}']
    raw, cookies = call("use", "1-f4240", "1", "100", "3", "1", sid="1-f4240")
    assert cookies is None, "the caller's copy is current: no cookies sent"
    # an expiry flips a generation once
    assert int(call("expire", "1-f4240", "1", sid="1-f4240")[1]) == 1
    assert int(call("expire", "1-f4240", "1", sid="1-f4240")[1]) == 0
    assert int(call("claim", "1-f4240", "w2", "60", sid="1-f4240")[1]) == 1
    call("logged", "1-f4240", "w2", "1", "", sid="1-f4240")
    # the third use ends it (SESSION_MAX_USES 3), its cookies with it
    call("use", "1-f4240", "1", "100", "3", "1", sid="1-f4240")
    assert call("use", "1-f4240", "1", "100", "3", "1", sid="1-f4240")[0] in (b"", None)
    assert not redis_client.exists(cookies_key("s", "1-f4240")) and not redis_client.hexists(pool_key("s"), "1-f4240")
    # a failed login ends the session and counts the failures in a row
    assert int(call("claim", "2-f4240", "w1", "60", sid="2-f4240")[1]) == 1
    assert int(call("logged", "2-f4240", "w1", "0", "bad password", sid="2-f4240")[1]) == 1
    counters = redis_client.hgetall(stats_key("s"))
    assert counters[b"failing"] == b"1" and counters[b"why"] == b"login failed: bad password"
    assert counters[b"logins"] == b"2" and counters[b"expired"] == b"1" and counters[b"retired"] == b"2"
    # after a reset (its keys gone) the first session is "1" again, at another time: never an id a worker knew
    redis_client.delete(*redis_client.keys("s:*"))
    created, _ = script([*keys, cookies_key("s", "-")], ["pool", "1000.5", "2", "100", "3", "login", "", ""])
    assert created.startswith(b"1-") and created != b"1-f4240"
