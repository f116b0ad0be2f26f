"""Integration: a worker with no route to the internet (#67). Nothing a worker does at run time needs the internet:
a crawl of a site that sets cookies (Scrapy's cookie middleware asks tldextract about public suffixes) completes
with no traceback and no attempt to fetch the Public Suffix List.

The worker runs in a network namespace of its own (``unshare -n``: root, as in CI) whose only interface is
loopback, with its own Redis, MongoDB and site inside: this module run as a script (:func:`inside`) starts them
there, runs the worker and prints what the test checks.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

PAGES = 6


def _namespaces() -> str | None:
    """Why a network namespace cannot be made here (None: it can)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "no unshare(1) or ip(8) on this machine"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`unshare -n` fails here (it needs root or user namespaces): {probe.stderr.strip()}"
    return None


def test_a_worker_with_no_route_to_the_internet_crawls_a_site_with_cookies_without_a_traceback(tmp_path):
    why = _namespaces()
    if why:
        pytest.skip(f"a worker offline needs a network namespace of its own: {why}")
    done = subprocess.run(["unshare", "-n", sys.executable, "-m", "tests.integration.test_offline", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"the run in the namespace failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    log = Path(result["log"]).read_text(errors="replace")

    assert result["offline"], "the namespace has a route out: the test proves nothing"
    assert result["code"] == 0, log[-4000:]
    assert sorted(result["fetched"]) == ["/", *(f"/p/{i}" for i in range(1, PAGES + 1))], log[-4000:]
    # the cookies went through Scrapy's cookie handling: each page went out with the home page's cookie
    assert all("home=1" in cookie for cookie in result["cookies"]), result["cookies"]
    assert "Traceback" not in log, log[-6000:]
    assert "tldextract" not in log and "Public Suffix" not in log, log[-6000:]
    assert not list(Path(result["tldcache"]).rglob("*.json")), "nothing fetched, nothing cached"


def inside(work: Path) -> dict:
    """In the namespace: loopback up, Redis, MongoDB and a site on it, a seed, one worker to the end."""
    import redis

    from crawlhub.services import EmbeddedMongo, EmbeddedRedis
    from tests.harness import crawl_env, start_worker
    from tests.sites.server import LocalSite

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    try:  # no route out: a connection to a public address fails at once
        socket.create_connection(("1.1.1.1", 443), timeout=5).close()
        offline = False
    except OSError:
        offline = True
    links = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(1, PAGES + 1))
    pages = {"/": (200, "text/html", f"<html><title>home</title>{links}</html>", {"Set-Cookie": "home=1; Path=/"})}
    pages.update({f"/p/{i}": (200, "text/html", f"<html><title>p{i}</title></html>", {"Set-Cookie": f"p{i}=1; Path=/"})
                  for i in range(1, PAGES + 1)})
    services = [EmbeddedRedis(work / "services"), EmbeddedMongo(work / "services")]
    for service in services:
        service.ensure()
    site = LocalSite(pages).start()
    try:
        redis_url, mongo_uri = services[0].url(), services[1].url()
        redis.Redis.from_url(redis_url).lpush("generic:start_urls", f"{site.url}/")
        # an empty cache of tldextract's: a list cached by an earlier run cannot hide a fetch
        env = crawl_env(redis_url, mongo_uri, "offline", work / "home", TLDEXTRACT_CACHE=work / "tldcache")
        worker = start_worker("generic", env, work / "logs", "offline")
        code = worker.wait(180)
        cookies = [dict(h.headers).get("Cookie", "") for h in site.hits if h.path.startswith("/p/")]
        return {"offline": offline, "code": code, "log": str(worker.log_path), "fetched": site.fetched(),
                "cookies": cookies, "tldcache": str(work / "tldcache")}
    finally:
        site.stop()
        for service in services:
            service.stop()


if __name__ == "__main__":
    print(json.dumps(inside(Path(sys.argv[1]))))
