"""Workers with roles (WORKER_CAPABILITIES): a plain worker and a browser worker on a site where some pages
need the browser. Real `scrapy crawl` workers, real Chromium, a local HTTPS site with redirects."""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest

from crawlhub._utils.urls import domain_of
from tests.harness import cli, start_worker, wait_all, wait_for
from tests.sites.quotes import quote_pages, quote_pages_js, render_handler, rendered

pytestmark = pytest.mark.usefixtures("chromium")  # missing: fails, unless CRAWLHUB_SKIP_BROWSER_TESTS=1

PAGES, PER_PAGE = 24, 4
JS = {n for n in range(1, PAGES + 1) if n % 3 == 0}  # 8 pages show their quotes only with JavaScript
REDIRECTED = {n for n in range(1, PAGES + 1) if n % 5 == 0}  # linked through /go/<n> (302), JS page 15 among them
RENDER_SECONDS = 1.0  # the browser's pages are slow: the plain pages must not wait for them


def roles_site(site):
    plain, js = quote_pages(PAGES, PER_PAGE), quote_pages_js(PAGES, PER_PAGE, prefix="")
    pages = {f"/page/{n}/": (js if n in JS else plain)[f"/page/{n}/"] for n in range(1, PAGES + 1)}
    links = "".join(f'<li><a href="{f"/go/{n}" if n in REDIRECTED else f"/page/{n}/"}">{n}</a></li>'
                    for n in range(1, PAGES + 1))
    pages["/"] = f'<html><head><title>Quotes</title></head><body><ul class="pages">{links}</ul></body></html>'

    def handler(site_, path):
        if path.startswith("/static/render.js"):
            time.sleep(RENDER_SECONDS)
            return render_handler(site_, path)
        go = re.fullmatch(r"/go/(\d+)", path)
        if go:
            return 302, "text/html", "", {"Location": f"/page/{go.group(1)}/"}
        return None

    return site(pages, handler=handler, tls=True)


def status(env) -> dict:
    out = cli(env, "status", "t_roles", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def lane_queued(redis_client, queue: str) -> int:
    """Requests queued in ``queue`` over every partition (the layout the crawl recorded)."""
    from scrapy.settings import Settings

    from crawlhub.frontier.operations import queued_per_domain
    from crawlhub.frontier.partitions import frontier_keys
    from tests.helpers import project_settings

    keys = frontier_keys(redis_client, Settings(project_settings()), "t_roles")
    return queued_per_domain(redis_client, keys).get(queue, 0)


@pytest.mark.parametrize("partitions", [1, 8])
def test_a_plain_worker_never_starts_chromium_and_its_pages_never_wait_for_the_browser_workers(
        env, site, redis_client, mongo_db, tmp_path, partitions):
    shop = roles_site(site)
    host = domain_of(shop.url)
    env = dict(env, SPIDER_MODULES="spiders,tests.sites.spiders")
    # one slot of the domain each (shared by the domain's lanes); a mixed site is never marked "browser only"
    settings = {"DOMAIN_CONCURRENCY": 2, "BROWSER_MARK_MIN_FALLBACKS": 1000, "MAX_IDLE_TIME_BEFORE_CLOSE": 3,
                "FRONTIER_PARTITIONS": partitions}
    plain = start_worker("t_roles", env, tmp_path, "plain", WORKER_CAPABILITIES="plain", **settings)
    redis_client.lpush("t_roles:start_urls", f"{shop.url}/")

    # the plain worker alone: every plain page stored, the browser's pages waiting in their lane
    plain_paths = {f"/page/{n}/" for n in range(1, PAGES + 1) if n not in JS}

    def plain_done_and_lane_full():
        assert plain.proc.poll() is None, plain.log()[-3000:]
        fetched = {h.path for h in shop.hits}
        return plain_paths <= fetched and lane_queued(redis_client, f"{host}#browser") == len(JS)

    assert wait_for(plain_done_and_lane_full, 90), (sorted({h.path for h in shop.hits}), plain.log()[-3000:])
    assert plain.proc.poll() is None, "the plain worker waits for the crawl (browser pages may bring plain links)"
    seen = status(env)
    (lane,) = seen["lanes"]
    assert (lane["lane"], lane["queued"], lane["domains"], lane["workers"]) == ("browser", len(JS), 1, [])
    assert any("browser lane and no live worker takes it" in p for p in seen["problems"]), seen["problems"]
    text = cli(env, "status", "t_roles").stdout
    assert "lane browser: 8 requests queued for 1 domain(s), NO live worker takes it" in text, text
    assert "takes=plain" in text
    assert rendered(shop) == []

    # a browser worker joins (as KEDA would start one on the lane's backlog) and takes only the browser's pages
    browser = start_worker("t_roles", env, tmp_path, "browser", WORKER_CAPABILITIES="browser", **settings)
    wait_all([plain, browser], 240)

    assert sorted(rendered(shop)) == sorted(f"/page/{n}/" for n in JS), "each browser page rendered once"
    hits = Counter(h.path for h in shop.hits if h.path.startswith(("/page/", "/go/")))
    assert hits == {**dict.fromkeys(plain_paths, 1), **{f"/page/{n}/": 2 for n in JS},
                    **{f"/go/{n}": 1 for n in REDIRECTED}}, "plain pages once; a browser page plain once, then rendered"
    assert mongo_db.quotes.count_documents({}) == PAGES * PER_PAGE, "every quote stored once"
    assert redis_client.llen("t_roles:dlq") == 0 and not redis_client.hgetall("t_roles:queued")
    done = status(env)
    assert (done["dlq"], done["queued"], done["lanes"], done["partitions"]) == (0, 0, [], partitions)
    plain_log, browser_log = plain.log(), browser.log()
    assert "Browser: " not in plain_log and "playwright" not in plain_log.lower(), "the plain worker never started Chromium"
    assert "Browser: " in browser_log
    assert f"'roles/moved/browser': {len(JS)}" in plain_log
    assert f"'browser/pages/{host}': {len(JS)}" in browser_log and "browser/plain_pages" not in browser_log, \
        "the browser worker took nothing but the browser's pages"


def test_a_domain_that_climbs_past_a_workers_rungs_goes_on_with_the_workers_that_have_them(
        env, site, redis_client, mongo_db, tmp_path):
    """A JavaScript challenge on every page: the domain climbs plain -> impersonate on a worker without the browser,
    whose block on its top rung sends the page to the browser's lane; a browser worker renders it, and the links it
    finds go straight to the browser's lane (the domain's rung, read by the lane spider middleware), not through
    the other worker. That worker never starts Chromium; every product is stored once."""
    from crawlhub.ladder import read_ladder
    from tests.sites.shop import CHALLENGE, challenged, shop_pages

    shop = site(challenged(shop_pages(80, 8)), tls=True)
    env = {**env, "PROXY_BAN_MARKERS": json.dumps([CHALLENGE.lower()]), "LADDER_CLIMB_AFTER": "1",
           "HEADER_PROFILES_FAMILIES": "chrome"}
    climber = start_worker("scrapeme", env, tmp_path, "climber", WORKER_CAPABILITIES="plain,impersonate")
    browser = start_worker("scrapeme", env, tmp_path, "browser", WORKER_CAPABILITIES="browser")
    redis_client.lpush("scrapeme:start_urls", f"{shop.url}/shop/")
    wait_all([climber, browser], 240)

    assert mongo_db.products.count_documents({}) == len(mongo_db.products.distinct("url")) == 80
    assert read_ladder(redis_client)[domain_of(shop.url)]["rung"] == "browser"
    climbed, rendered_by = climber.log(), browser.log()
    assert "Browser: " not in climbed and "Browser: " in rendered_by
    assert "fetching it again on browser (by a worker that has it)" in climbed
    moved = int(re.search(r"'roles/moved/browser': (\d+)", climbed).group(1)) if "roles/moved" in climbed else 0
    assert moved == 0, f"the browser worker's links went to the lane themselves ({moved} moved by the other worker)"
    assert f"'browser/pages/{domain_of(shop.url)}': 10" in rendered_by, "each list page rendered once"
    pages = Counter(h.path for h in shop.hits if h.path.startswith("/shop"))
    assert max(pages.values()) <= 3, "no page fetched more than once per rung"
    assert redis_client.llen("scrapeme:dlq") == 0


def test_a_browser_worker_killed_mid_render_loses_nothing_and_its_pages_stay_in_the_browser_lane(
        env, site, redis_client, mongo_db, tmp_path):
    """kill -9 of the browser worker while it holds browser pages: their leases expire and go back to the browser's
    lane (a lease names its lane), not to the plain worker; a second browser worker renders them; every quote is
    stored once and nothing is in the dead-letter list."""
    shop = roles_site(site)
    env = dict(env, SPIDER_MODULES="spiders,tests.sites.spiders")
    settings = {"DOMAIN_CONCURRENCY": 2, "BROWSER_MARK_MIN_FALLBACKS": 1000, "MAX_IDLE_TIME_BEFORE_CLOSE": 3,
                "LEASE_TTL": 3, "LEASE_RECLAIM_INTERVAL": 1}
    plain = start_worker("t_roles", env, tmp_path, "plain", WORKER_CAPABILITIES="plain", **settings)
    first = start_worker("t_roles", env, tmp_path, "browser-1", WORKER_CAPABILITIES="browser", **settings)
    redis_client.lpush("t_roles:start_urls", f"{shop.url}/")

    def rendering():
        assert first.proc.poll() is None, first.log()[-3000:]
        return rendered(shop) and any(b"#browser" in k for k in redis_client.hkeys("t_roles:leases"))

    assert wait_for(rendering, 120), "the browser worker renders and holds a browser page"
    first.kill()
    second = start_worker("t_roles", env, tmp_path, "browser-2", WORKER_CAPABILITIES="browser", **settings)
    wait_all([plain, second], 240)

    assert mongo_db.quotes.count_documents({}) == PAGES * PER_PAGE, "every quote stored once"
    assert redis_client.llen("t_roles:dlq") == 0 and not redis_client.hgetall("t_roles:queued")
    assert int(redis_client.hget("t_roles:stats", "reclaimed") or 0) >= 1, "the dead worker's leases were reclaimed"
    assert set(rendered(shop)) == {f"/page/{n}/" for n in JS}
    assert f"'roles/moved/browser': {len(JS)}" in plain.log(), "each browser page handed over once: reclaimed to its lane"
    assert "Browser: " not in plain.log()
