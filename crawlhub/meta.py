"""Every request meta key crawlhub reads or writes, in one place.

A key set on a request that goes to Redis travels with it (JSON); the keys in
:data:`PER_DOWNLOAD` belong to one download and never leave the worker (a
chosen proxy's address and credentials among them).
"""

from __future__ import annotations

import json
from typing import Any

# the prefix of crawlhub's own keys, set by its components (a key a spider sets, such as ``revisit`` or ``rung``, has
# none): a seed may not carry them (crawlhub.seeds)
OWN_PREFIX = "crawlhub_"

# -- the frontier (crawlhub.frontier) ------------------------------------------------------------------
LEASE = "crawlhub_lease"  # the lease id of the request being processed (never stored)
LEASE_PAYLOAD = "crawlhub_lease_payload"  # the leased request's JSON as the frontier holds it (never stored)
ATTEMPTS = "crawlhub_attempts"  # failed attempts so far
FIRST_ATTEMPT = "crawlhub_first_attempt"  # time of the first attempt
EXPIRIES = "crawlhub_expiries"  # times its lease expired (its worker died)
SAME_PAGE = "crawlhub_same_page"  # this request replaces its lease's (same page, fetched another way); True, or the
# URL it replaces (the page asked again from the start of its redirects: the lease is the last hop's)
# the download failure Scrapy reported for this request (crawlhub.logformatter): a leaked lease's reason
FAILURE = "crawlhub_failure"
# what a component decided of this leased request (crawlhub.intent): the scheduler carries it out
END = "crawlhub_end"
# what the URL status store writes once this page's items are stored (crawlhub.revisit): StatusUpdate, GoneCheck
AFTER_STORE = "crawlhub_after_store"

# -- continuous crawling (crawlhub.revisit) -------------------------------------------------------------
REVISIT = "revisit"  # set by a spider: this page's revisit interval ("6h", seconds), or False: never again
STATUS = "crawlhub_status"  # a revisit: what the status store knew (validators, signature, interval, due time)

# -- politeness and robots.txt -----------------------------------------------------------------------
RESLOT = "crawlhub_reslot"  # this leased request's slot was used by robots.txt; take a new one
SLOT_TAKEN = "crawlhub_slot_taken"  # this unleased request already has a slot
ROBOTS_WAITS = "crawlhub_robots_waits"  # times this request waited for an unavailable robots.txt

# -- the spider ----------------------------------------------------------------------------------------
SEED_HOST = "crawlhub_seed_host"  # the host of the seed a request comes from (redirects may move it)

# -- proxies and header profiles -----------------------------------------------------------------------
PROXY = "crawlhub_proxy"  # the id of the proxy chosen for this download
PROXY_TRIED = "crawlhub_proxy_tried"  # ids this page was already banned on
PROXY_SWITCHES = "crawlhub_proxy_switches"  # immediate re-fetches through another proxy
PROFILE = "crawlhub_profile"  # the header profile this download used
PROFILE_HEADERS = "crawlhub_profile_headers"  # header names the profile middleware set (removed on a retry)
HEADER_PROFILE = "header_profile"  # set by a spider: a profile id to use, or False for none

# -- the ladder: plain, impersonate, browser (crawlhub.downloadermiddlewares.ladder, crawlhub.impersonate) -----------
RUNG = "rung"  # set by a spider: pins the request to a rung ("plain", "impersonate", "browser")
DOWNLOAD_RUNG = "crawlhub_rung"  # the rung the ladder chose for this download (chosen again for each attempt)
IMPERSONATE_TARGET = "impersonate"  # set by a spider: the curl_cffi target ("chrome", "firefox"...) of the impersonate rung
PROBE = "crawlhub_probe"  # this download probes a cheaper rung for its domain: the rung the domain is on (the same)
CLIMBED = "crawlhub_climbed"  # the rung this page was last blocked on (its replacement goes a rung higher)
LANE = "crawlhub_lane"  # the lane this page was moved to (crawlhub.roles): queued for the workers with that rung

# -- sessions shared by the cluster (crawlhub.sessions, crawlhub.downloadermiddlewares.sessions) -------------------
SESSION = "session"  # the session id this request goes out in (set by a spider to continue one; else chosen)
NO_SESSION = "dont_session"  # set by a spider: this request goes out with no session (Scrapy's own cookie jar)
SESSION_GEN = "crawlhub_session_gen"  # the session's login generation this download used
SESSION_LOGIN = "crawlhub_session_login"  # a download of a login (spider.login): no session is chosen for it
SESSION_PROXY = "crawlhub_session_proxy"  # the proxy id the session is bound to (ProxyMiddleware uses it)
SESSION_PROFILE = "crawlhub_session_profile"  # the header profile the session set (another session sets its own)
RELOGINS = "crawlhub_relogins"  # times this page found its session expired and went again after a login

# -- cluster stats ---------------------------------------------------------------------------------------
ATTEMPT_STARTED = "crawlhub_attempt_started"  # when this attempt went to the downloader (monotonic)

# Meta of one download only: never written to Redis.
PER_DOWNLOAD = ("proxy", "_auth_proxy", "_scheme_proxy", "playwright_context", "playwright_context_kwargs", PROXY,
                FAILURE, END, AFTER_STORE, LEASE_PAYLOAD)

# Meta that belongs to the request a child was made from, not to the child (Scrapy copies
# meta into follow-ups in some spiders): a new request starts without them.
PARENT_ONLY = (LEASE, ATTEMPTS, FIRST_ATTEMPT, EXPIRIES, STATUS, FAILURE, END, AFTER_STORE, LEASE_PAYLOAD, DOWNLOAD_RUNG,
               PROBE, CLIMBED, LANE, SESSION_GEN, SESSION_LOGIN, SESSION_PROXY,
               SESSION_PROFILE)

# meta of one fetch, not of the page: left out of a page's request kept for a later fetch (the URL status store's,
# the quarantine's)
NOT_STORED = (*PARENT_ONLY, ROBOTS_WAITS, RESLOT, SLOT_TAKEN, SAME_PAGE, "redirect_urls", "redirect_times",
              "redirect_ttl", "redirect_reasons", "download_slot", "download_latency")


def stored_request(payload: bytes | str) -> str:
    """A leased request's JSON (:data:`LEASE_PAYLOAD`) as a store keeps it to queue the page again: no per-fetch meta,
    and never filtered as a duplicate (the page was crawled)."""
    return json.dumps(stored_request_data(payload), separators=(",", ":"), ensure_ascii=False)


def stored_request_data(payload: bytes | str) -> dict[str, Any]:
    """:func:`stored_request`, as data."""
    data: dict[str, Any] = json.loads(payload)
    request_meta = data.get("meta") or {}
    for key in NOT_STORED:
        request_meta.pop(key, None)
    if request_meta:
        data["meta"] = request_meta
    else:
        data.pop("meta", None)
    data["dont_filter"] = True
    return data
