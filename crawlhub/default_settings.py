"""crawlhub's settings: every setting with its default.

:class:`crawlhub.Addon` puts these into a Scrapy project's settings at the
"addon" priority (so the project's own settings.py wins), then applies the
environment: each name below can be overridden by an environment variable of
the same name (``REDIS_URL=redis://10.0.0.5:6379/0 scrapy crawl scrapeme``),
read as the default's type. ``-s NAME=VALUE`` on the command line wins over
both.

This module is the settings reference: docs/settings.md is generated from it
(docs/hooks/settings_reference.py) when the docs are built. The comment right
above a setting is its documentation (settings right below it with no comment
of their own share it), a ``# --- Title ---`` line starts a section, and
``user_settings`` names the few a spider or a deployment sets, shown first.
A setting's anchor there is its name in lower case: ``settings.md#domain_rate``.

Two settings are read before any add-on runs, so a project sets them itself
(crawlhub's own settings.py does): ``COMMANDS_MODULE = "crawlhub.commands"``
(``scrapy crawl`` checks Redis first; shell, check, parse, fetch and view stay
off the shared frontier) and, for ``scrapy genspider -t crawlhub``,
``TEMPLATES_DIR`` (:data:`crawlhub.TEMPLATES_DIR`).
"""

from typing import Any

# The settings users set (the few a spider or a deployment needs), in the order the reference shows them,
# with a line each; every other setting tunes crawlhub's internals. Not a setting: the add-on and Scrapy take
# every name that str.isupper() accepts ("_USER_SETTINGS" too), so this one is lower case.
user_settings = {
    "REDIS_URL": "the Redis of the shared frontier; empty = the embedded one",
    "MONGO_URI": "the MongoDB items are stored in; empty = the embedded one",
    "MONGO_DATABASE": "the database of the items",
    "CRAWLHUB_HOME": "where the embedded servers keep their data",
    "USER_AGENT": "the name your crawler gives the sites",
    "ROBOTSTXT_OBEY": "obey robots.txt",
    "CONCURRENT_REQUESTS": "downloads at once, per worker",
    "DOMAIN_RATE": "requests per second to one domain, whole cluster",
    "DOMAIN_CONCURRENCY": "downloads at once from one domain, whole cluster",
    "DOMAIN_LIMITS": "per-domain rates and caps",
    "RETRY_TIMES": "retries before a page goes to the dead-letter list",
    "CRAWL_BUDGET": "pages the whole cluster may fetch for a spider",
    "BROWSER_ENABLED": "headless Chromium for every spider",
    "CHROMIUM_PATH": "the Chromium to launch",
    "PROXY_POOLS": "proxies, by pool",
    "PROXY_FILE": "proxies, from a file",
    "FRONTIER_PARTITIONS": "partitions of the frontier (Redis Cluster)",
    "METRICS_PORT": "a worker's Prometheus metrics port",
    "QUALITY_WEBHOOK_URL": "where data-quality events are posted",
    "LOG_LEVEL": "Scrapy's log level",
}

# --- Joining the cluster ---------------------------------------------------
# False: this process does not join the shared frontier (Scrapy's in-memory
# scheduler, no seeds, no worker record, no cluster stats); the shell, check,
# parse, fetch and view commands set it.
CRAWLHUB_SHARED = True
# --- Services -------------------------------------------------------------
# The Redis of the shared frontier: redis://[:password@]host:port/db (rediss:// for TLS).
# Unset (empty) = the embedded local servers under CRAWLHUB_HOME, started on
# first use and shared by every worker on this machine.
REDIS_URL = ""
# Seconds a starting worker waits for Redis to answer (a cluster: until every master says it is ok) before it
# gives up.
REDIS_STARTUP_WAIT = 30.0
# A Redis Cluster: its nodes ("host:port,host:port", any few of them), or REDIS_URL in the form
# redis+cluster://[:password@]host:port[,host:port...]. Empty: REDIS_URL is one Redis.
REDIS_CLUSTER_NODES = ""
# Reconnection tries (exponential backoff, 0.1 s to 3 s) before a Redis call fails.
REDIS_RETRIES = 10
# Extra redis-py client options (JSON object in the environment).
REDIS_PARAMS: dict[str, Any] = {}
# MongoDB for items: mongodb://[user:password@]host:port/; unset (empty) = the embedded MongoDB-wire server.
MONGO_URI = ""
# The database crawlhub's collections are in.
MONGO_DATABASE = "crawlhub"
# Where the embedded servers keep their data; empty = <project>/.crawlhub
CRAWLHUB_HOME = ""
# Ports of the embedded servers when free (so plain `redis-cli lpush ...` reaches it);
# taken: a free port, and the log prints the exact `redis-cli -p PORT ...` line. 0 = any free port.
EMBEDDED_REDIS_PORT = 6379
EMBEDDED_MONGO_PORT = 27017

# --- Frontier (scrapy-redis, JSON-serialized, shared by every worker) ------
# The shared frontier, as Scrapy's scheduler and duplicate filter (scrapy-redis' own classes named here become
# these: crawlhub.habits).
SCHEDULER = "crawlhub.frontier.scheduler.RedisScheduler"
DUPEFILTER_CLASS = "crawlhub.frontier.dupefilter.RedisDupeFilter"
# Scrapy's fingerprint, the URL read without URL_TRACKING_PARAMS (crawlhub.fingerprint): a page linked with
# ?utm_source=... is the page, fetched once. A project's own fingerprinter replaces it.
REQUEST_FINGERPRINTER_CLASS = "crawlhub.fingerprint.RequestFingerprinter"
# Query (and ;path) parameters that only track a visit, never change the page (names or patterns such as utm_*,
# case ignored): left out of the request fingerprint and of a key URL (ITEM_KEY_URLS_CANONICAL). [] = none.
URL_TRACKING_PARAMS = [
    "utm_*", "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "twclid", "ttclid", "yclid",
    "igshid", "mc_cid", "mc_eid", "_ga", "_gl", "_hsenc", "_hsmi", "mkt_tok", "jsessionid", "phpsessid",
]
# Key prefixes of a spider's shared request queue and duplicate filter in Redis (docs/redis-keys.md).
SCHEDULER_QUEUE_KEY = "%(spider)s:requests"
SCHEDULER_DUPEFILTER_KEY = "%(spider)s:dupefilter"
# A worker never wipes the shared queue or dupefilter when it closes; only
# `crawlhub reset SPIDER` does. (scrapy-redis's default, False, would.)
SCHEDULER_PERSIST = True
# Classes a request read back from Redis may be rebuilt as (anything else is
# refused: a payload must not be able to import code).
FRONTIER_REQUEST_CLASSES = [
    "scrapy.http.request.Request",
    "scrapy.http.request.form.FormRequest",
    "scrapy.http.request.json_request.JsonRequest",
]
# How often (seconds) an idle worker checks the shared queue for work that
# other workers pushed (Scrapy alone would wait for its 5 s heartbeat); 0 = off.
FRONTIER_POLL_INTERVAL = 0.5
# While a worker has nothing to do and the frontier nothing anywhere, its poll for other workers' new work
# backs off from FRONTIER_POLL_INTERVAL, doubling, to this many seconds (work seen anywhere starts over).
FRONTIER_IDLE_POLL_MAX = 2.0
# Undecodable payloads are set aside in <spider>:bad_requests (capped).
FRONTIER_BAD_REQUESTS_MAX = 10000
# Ready domains a lease looks at (at least as many as the requests it asks for), best head-of-queue priority first.
FRONTIER_DOMAINS_PER_LEASE = 16
# Most requests one call to the frontier leases (the downloader's free slots, up to this).
FRONTIER_LEASE_BATCH = 32
# While the downloader is busy and the frontier gave all that was asked, fewer free slots than this (at
# most CONCURRENT_REQUESTS) wait for more, so that a round leases several: a round costs Redis a fixed few
# hundred microseconds. 1 = lease every free slot at once.
FRONTIER_LEASE_MIN = 16
# The longest those slots wait (seconds); never more than a tenth of the downloads' mean latency.
FRONTIER_LEASE_LINGER = 0.05
# While the downloader is the limit, a round also leases up to this many requests more, only from domains
# with no pace and no cap (DOMAIN_RATE and DOMAIN_CONCURRENCY 0, no Crawl-delay, not slowed down): they
# wait in the worker for free slots, and a round's fixed cost is shared by more pages. Never under a crawl
# budget. -1 = CONCURRENT_REQUESTS; 0 = off.
FRONTIER_LEASE_AHEAD = -1
# Fingerprints a worker remembers having sent the shared duplicate filter (two generations of this
# many): a link met again (menus, pagination) is dropped in the worker, not sent to Redis. 0 = off.
FRONTIER_LOCAL_FILTER_SIZE = 100000
# Partitions of a spider's frontier (docs/frontier.md, docs/deploy.md: Redis Cluster). A domain
# belongs to one partition (a stable hash of its name) with its queue, politeness state and
# duplicate-filter entries; each partition is one Redis Cluster slot ({<spider>:<p>}). 1 on a
# plain Redis is the classic layout; fixed for the life of a frontier (`crawlhub reset` to change).
FRONTIER_PARTITIONS = 1
# Ready partitions one round leases from, at most (a worker spreads its batch over them while its rounds
# get less than they ask for). While they get all they ask for, a round asks fewer: each partition's call
# costs its master a few hundred microseconds beside its leases. FRONTIER_LEASES_PER_PARTITION says how:
# 0 = each partition for what it had ready the last time this worker asked it, as few as that takes (one
# asked for all the round still wants); N > 1 = one partition per N requests the round asks for; 1 = always
# FRONTIER_PARTITIONS_PER_LEASE of them.
FRONTIER_PARTITIONS_PER_LEASE = 4
FRONTIER_LEASES_PER_PARTITION = 0
# Seconds before a partition hinted empty is probed again anyway (<spider>:ready says which partitions
# have work, and every write that adds work marks its partition at once: this is the safety net for a
# mark lost with a worker killed between its links and its mark).
FRONTIER_PARTITION_RECHECK = 60.0
# Partitioned frontiers: links for a partition the round does not call anyway (to lease, or for finished
# downloads) wait in the worker, with the round's acks (a page ends only when its links are queued), until
# FRONTIER_LINK_BATCH are pending there, for at most this many seconds (and a quarter of LEASE_TTL), or at once
# when the worker runs short of work or closes: each partition's call costs its master a few hundred
# microseconds beside its links. A reset drops them; a worker killed loses them with its unacked pages, which
# are leased again. 0 = every link goes with the round that found it.
FRONTIER_LINK_HOLD = 1.0
FRONTIER_LINK_BATCH = 32
# Replicas that must have a round's links (WAIT) before the leases of the pages they came from end in
# other partitions (0 = do not wait). With replicas, 1 means a failover re-fetches pages, never loses
# links (docs/deploy.md: Redis Cluster, failover); without replicas leave it 0 (WAIT would time out).
FRONTIER_REPLICA_WAIT = 0
# Most milliseconds one round waits for those replicas (then goes on, as with asynchronous replication).
FRONTIER_REPLICA_WAIT_TIMEOUT = 100
# Duplicate filter (docs/frontier.md): "exact" = 64-bit fingerprints in
# DUPEFILTER_BUCKETS integer sets per partition (~8.5 bytes per URL while each bucket stays
# under Redis's set-max-intset-entries, 512: buckets >= URLs / FRONTIER_PARTITIONS / 400); "bloom" =
# a Bloom filter for DUPEFILTER_BLOOM_CAPACITY URLs at DUPEFILTER_BLOOM_ERROR_RATE
# (RedisBloom when the server has it, else a Redis bitmap; ~1.8 bytes per URL at 0.1%).
DUPEFILTER_MODE = "exact"
DUPEFILTER_BUCKETS = 4096
DUPEFILTER_BLOOM_CAPACITY = 10000000
DUPEFILTER_BLOOM_ERROR_RATE = 0.001

# --- Politeness: per domain, for the whole cluster (docs/politeness.md) -----
# Requests per second to one domain from all workers together ("4", "4/s",
# "30/m", "100/h"; 0 = no limit), and downloads at once (0 = no limit).
DOMAIN_RATE = "4/s"
DOMAIN_CONCURRENCY = 8
# Per-domain overrides: {"example.com": "1/s", "big.org": {"rate": "20/s", "concurrency": 16}}.
# `crawlhub limits set DOMAIN RATE --concurrency N` overrides both at run time.
DOMAIN_LIMITS: dict[str, Any] = {}
# Requests a domain may take back to back after a quiet spell (1 = strictly paced).
DOMAIN_BURST = 1
# Answers that slow a domain down for every worker (Retry-After blocks it
# until then); each doubles the interval, up to DOMAIN_BACKOFF_MAX_FACTOR
# times; each success multiplies the factor by DOMAIN_RECOVERY until it is 1.
# A domain with no rate limit is slowed from DOMAIN_BACKOFF_BASE seconds.
DOMAIN_SLOWDOWN_CODES = [429, 503]
DOMAIN_BACKOFF_MAX_FACTOR = 32.0
DOMAIN_RECOVERY = 0.8
DOMAIN_BACKOFF_BASE = 0.5

# --- Leases, retries, dead letters (docs/reliability.md) -------------------
# Seconds a lease lasts without renewal; live workers renew every LEASE_TTL/3.
LEASE_TTL = 60.0
# How often (seconds) a worker runs lease upkeep, and how often one of the
# workers looks for expired leases of dead workers.
LEASE_MAINTENANCE_INTERVAL = 1.0
LEASE_RECLAIM_INTERVAL = 5.0
# A request whose lease expired more often than this goes to the DLQ.
LEASE_MAX_EXPIRIES = 5
# Retries after the first attempt (Scrapy's setting), then <spider>:dlq.
RETRY_TIMES = 2
# Statuses that are retried (HTTP_GONE_CODES never are).
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408, 429]
# Answers that say the page is gone: not retried, counted per domain (permanent_failures), the lease
# acked (a revisited page's items are marked gone). Any other error status (400 or more) that is not
# retried and that the spider does not handle (handle_httpstatus_list, HTTPERROR_ALLOWED_CODES) goes to
# the dead-letter list with its status: nothing is ignored silently.
HTTP_GONE_CODES = [404, 410]
# Backoff before retry n: RETRY_BACKOFF_BASE * 2**(n-1) seconds, at most
# RETRY_BACKOFF_MAX, times a random 0.5-1.0; never before Retry-After.
RETRY_BACKOFF_BASE = 1.0
RETRY_BACKOFF_MAX = 60.0
# Requests (pages) the whole cluster may take for a spider; 0 = no limit.
# `crawlhub budget SPIDER N` sets it at run time (<spider>:budget wins).
CRAWL_BUDGET = 0

# --- Seeds ----------------------------------------------------------------
# Where a spider's seeds are read (a spider's `redis_key` wins).
REDIS_START_URLS_KEY = "%(name)s:start_urls"
# Seeds read per idle tick; 0 = CONCURRENT_REQUESTS.
SEED_BATCH_SIZE = 0
# Larger seeds are refused, set aside in <spider>:bad_seeds, which keeps the last BAD_SEEDS_MAX.
SEED_MAX_BYTES = 8192
BAD_SEEDS_MAX = 10000
# Seconds a worker waits with no seeds and an empty shared queue before it
# closes; 0 = wait for seeds forever (scrapy-redis's convention).
MAX_IDLE_TIME_BEFORE_CLOSE = 0
# `crawlhub status` calls a crawl done (state "done") once its frontier is empty, nothing is in flight and no
# download was attempted for this many seconds
STATUS_DONE_AFTER = 30.0

# --- Data quality (docs/quality.md) ---------------------------------------
# Judge every page fetched again and keep a broken extraction from damaging what is stored.
QUALITY_ENABLED = True
# A page fetched again that yields less than this share of the items of its last healthy fetch is broken:
# its items are not marked gone, it stays due, `crawlhub quality` shows it.
QUALITY_PAGE_MIN_SHARE = 0.5
# Seconds between a worker's batched writes of broken pages and events to Redis.
QUALITY_FLUSH_INTERVAL = 2.0
# Above this many broken pages of a spider, every flush warns.
QUALITY_BROKEN_MAX = 10000
# Seconds between a worker's reads of the cluster's quality figures (events open and close on them).
QUALITY_CHECK_INTERVAL = 10.0
# A revisiting spider's crawl cycle, seconds (a one-shot spider's cycle is its crawl: the frontier epoch);
# the previous cycle is the baseline. Cycles' figures are kept QUALITY_RETENTION seconds.
QUALITY_CYCLE = 86400.0
QUALITY_RETENTION = 2592000
# Events open and close on the recent figures: the last two windows of QUALITY_WINDOW seconds.
QUALITY_WINDOW = 300.0
# Too little to judge: fewer items of a type (pages of a pattern) than this in the recent figures.
QUALITY_MIN_ITEMS = 20
QUALITY_MIN_PAGES = 5
# A field's coverage that falls by more than this from the baseline cycle opens an event (floors are declared
# per field: field(metadata={"coverage": 0.9})).
QUALITY_COVERAGE_MARGIN = 0.2
# Items quarantined / requests dead-lettered above these shares of the recent figures open an event.
QUALITY_QUARANTINE_MAX = 0.1
QUALITY_DLQ_MAX = 0.1
# `crawlhub quality` exits non-zero while the cycle's quality score (0..100) is below this; 0 = no floor.
QUALITY_SCORE_MIN = 0.0
# Events and change alerts POSTed here (JSON, or Slack's {"text": ...} with QUALITY_WEBHOOK_FORMAT = "slack");
# "" = off. Set it in the environment: it is a secret (only its host is logged).
QUALITY_WEBHOOK_URL = ""
QUALITY_WEBHOOK_FORMAT = "json"
# Seconds per POST; a failed one (no answer, a 5xx or a 429) is tried again after 1, 2, 4... seconds,
# QUALITY_WEBHOOK_RETRIES times, then logged as lost (the event stays in Redis).
QUALITY_WEBHOOK_TIMEOUT = 10.0
QUALITY_WEBHOOK_RETRIES = 3

# --- Workers --------------------------------------------------------------
# Seconds between a worker's records in <spider>:workers (its heartbeat).
WORKER_HEARTBEAT_INTERVAL = 5.0
# A running worker whose last heartbeat is older than this is shown dead; 0 = 3 heartbeats.
WORKER_DEAD_AFTER = 0.0

# --- Cluster stats, audit log, metrics (docs/cli.md) ------------------------
# Every worker counts each download attempt (per spider and domain: requests,
# status classes, errors, bytes, latency histogram; items, retries, DLQ) and
# sends the counts and its audit-log entries to Redis in one pipeline every
# CLUSTER_STATS_INTERVAL seconds. Per-minute counts are kept CLUSTER_STATS_RETENTION
# seconds; the audit log (a stream per spider) keeps about AUDIT_LOG_MAXLEN attempts.
CLUSTER_STATS_ENABLED = True
CLUSTER_STATS_INTERVAL = 2.0
CLUSTER_STATS_RETENTION = 172800
AUDIT_LOG_MAXLEN = 100000
# Prometheus metrics of this worker on http://METRICS_ADDRESS:METRICS_PORT/metrics; 0 = off.
METRICS_PORT = 0
METRICS_ADDRESS = "0.0.0.0"

# --- Components: crawlhub's extensions and middlewares (a project's own are merged in) ---
EXTENSIONS = {
    "crawlhub.extensions.workers.WorkerRegistry": 500,
    # continuous crawling: one worker at a time queues the pages that are due (crawlhub.revisit)
    "crawlhub.extensions.refresher.Refresher": 510,
    # data quality: a page whose extraction broke never damages what is stored (docs/quality.md)
    "crawlhub.extensions.quality.QualityMonitor": 520,
    # its events and change alerts to QUALITY_WEBHOOK_URL (off while it is "")
    "crawlhub.extensions.webhook.QualityWebhook": 530,
    # no listening ports on workers
    "scrapy.extensions.telnet.TelnetConsole": None,
    "scrapy.extensions.remote_control.RemoteControl": None,
}

DOWNLOADER_MIDDLEWARES = {
    # closest to the engine: ends the lease of a dropped or failed request
    "crawlhub.downloadermiddlewares.leases.LeaseDownloaderMiddleware": 10,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "crawlhub.downloadermiddlewares.robots.SharedRobotsMiddleware": 100,
    # the rung of each download (plain, impersonate, browser): the domain's, cluster-wide; it climbs on blocks
    "crawlhub.downloadermiddlewares.ladder.LadderMiddleware": 360,
    # which requests Chromium renders (decided before the proxy and the header
    # profile are chosen: both depend on it); browser timeouts become retries
    "crawlhub.downloadermiddlewares.browser.BrowserMiddleware": 370,
    # sessions (a spider with login or use_sessions): the session binds the proxy and the profile chosen next
    "crawlhub.downloadermiddlewares.sessions.SessionMiddleware": 375,
    # a proxy from the domain's pool, then one coherent browser header profile
    # (before Scrapy's DefaultHeaders 400 and UserAgent 500, which only fill gaps)
    "crawlhub.downloadermiddlewares.proxy.ProxyMiddleware": 380,
    "crawlhub.downloadermiddlewares.headers.HeaderProfileMiddleware": 395,
    # continuous crawling: conditional GET on a revisit, each fetch's news for the URL status store
    "crawlhub.downloadermiddlewares.revisit.RevisitMiddleware": 540,
    "crawlhub.downloadermiddlewares.retry.FrontierRetryMiddleware": 550,
    # Scrapy's redirects, but too many hops, a loop or a hop off the seed's host end the lease
    "scrapy.downloadermiddlewares.redirect.MetaRefreshMiddleware": None,
    "scrapy.downloadermiddlewares.redirect.RedirectMiddleware": None,
    "crawlhub.downloadermiddlewares.redirect.FrontierMetaRefreshMiddleware": 580,
    "crawlhub.downloadermiddlewares.redirect.FrontierRedirectMiddleware": 600,
    # Scrapy's cookies, the public-suffix check on tldextract's bundled list: a worker needs no internet
    "scrapy.downloadermiddlewares.cookies.CookiesMiddleware": None,
    "crawlhub.downloadermiddlewares.cookies.OfflineCookiesMiddleware": 700,
    # sees a proxied answer before retries do: a ban switches proxy, not an attempt
    "crawlhub.downloadermiddlewares.proxy.ProxyBanMiddleware": 900,
    # a blocked answer (a 403, a ban marker) below the top rung climbs the ladder: a site that refuses how
    # the client opens TLS refuses every proxy alike, so no proxy is blamed until the top rung is blocked too
    "crawlhub.downloadermiddlewares.ladder.LadderBlockMiddleware": 910,
    # a session's raw answers first: its cookies (a redirect's too) into Redis, a ban ends it, an expiry logs in
    "crawlhub.downloadermiddlewares.sessions.SessionResponseMiddleware": 920,
    # closest to the download: sees every raw response (429, 3xx) first
    "crawlhub.downloadermiddlewares.politeness.PolitenessMiddleware": 950,
    # every attempt, as it went out and came back: cluster stats and the audit log
    "crawlhub.downloadermiddlewares.stats.ClusterStatsMiddleware": 990,
}
SPIDER_MIDDLEWARES = {
    # closest to the engine: knows when a page's output is all processed
    "crawlhub.spidermiddlewares.leases.LeaseSpiderMiddleware": 10,
    # links to a domain on a rung above plain: queued in that rung's lane (workers with roles)
    "crawlhub.spidermiddlewares.lanes.LaneSpiderMiddleware": 20,
    # an item's relative URLs read from a page with <base href>: absolute against that base, as a browser reads them
    "crawlhub.spidermiddlewares.base_url.BaseUrlSpiderMiddleware": 30,
}

# --- Crawling -------------------------------------------------------------
# Name yourself to the sites you crawl: "mycrawler/1.0 (+https://example.org/bot)". Sent
# when header profiles are off (HEADER_PROFILES_ENABLED); robots.txt rules are always
# matched for ROBOTSTXT_USER_AGENT or this name, whatever browser the requests look like.
USER_AGENT = "crawlhub/0.1"
# robots.txt is fetched once per origin per ROBOTSTXT_TTL seconds for the
# whole cluster and kept in Redis (crawlhub:robots:<origin>). Google's rules:
# 4xx = allow all; 5xx, 429 or no answer = disallow all, and the origin's
# requests wait ROBOTSTXT_ERROR_RETRY seconds before it is fetched again.
ROBOTSTXT_OBEY = True
# The name matched against robots.txt's User-agent lines; empty = USER_AGENT.
ROBOTSTXT_USER_AGENT = ""
# Seconds a fetched robots.txt is kept, and seconds an origin's requests wait after a 5xx or a 429 for it.
ROBOTSTXT_TTL = 86400
ROBOTSTXT_ERROR_RETRY = 600
# An origin that gives no answer at all (connection refused, a name that does not resolve, a timeout,
# a TLS failure) is asked again this soon (at most ROBOTSTXT_ERROR_RETRY): a dead host's requests end
# in the DLQ within about ROBOTSTXT_UNAVAILABLE_MAX_WAITS * this (3 minutes), not half an hour.
ROBOTSTXT_UNREACHABLE_RETRY = 60
# Times a request waits for an unavailable robots.txt before it goes to the DLQ with the reason.
ROBOTSTXT_UNAVAILABLE_MAX_WAITS = 3
# Seconds to fetch robots.txt.
ROBOTSTXT_TIMEOUT = 10
# Larger robots.txt files are cut here (Google reads 500 KiB).
ROBOTSTXT_MAX_BYTES = 512000
# Downloads at once per worker; 1 or more (Scrapy's 0, no limit, is refused: the frontier leases the
# downloader's free slots).
CONCURRENT_REQUESTS = 16
# Per worker; the cluster-wide cap per domain is DOMAIN_CONCURRENCY.
CONCURRENT_REQUESTS_PER_DOMAIN = 16
# Seconds between requests to a domain, per worker, on top of DOMAIN_RATE (leave it at 0).
DOWNLOAD_DELAY = 0.0
# Seconds a download may take.
DOWNLOAD_TIMEOUT = 30
# A larger answer is cancelled and its request goes to the DLQ with the reason (Scrapy's default, 1 GiB,
# would hold a worker's memory on one file); over DOWNLOAD_WARNSIZE the log says so.
DOWNLOAD_MAXSIZE = 32 * 1024 * 1024
DOWNLOAD_WARNSIZE = 8 * 1024 * 1024
# Verify TLS certificates, for plain downloads and browser pages alike. False is Scrapy's own
# default (an https site with a self-signed or expired certificate is crawled); True refuses such sites.
TLS_VERIFY = False
# Scrapy's depth limit: links more than this many hops from a seed are not followed; 0 = none.
DEPTH_LIMIT = 0
# Depth limit of the `generic` spider when DEPTH_LIMIT is not set explicitly.
GENERIC_DEPTH_LIMIT = 3
# The asyncio reactor: crawlhub's download handlers (browser, impersonate) run on asyncio.
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
# Feeds and `crawlhub export` write UTF-8 text.
FEED_EXPORT_ENCODING = "utf-8"
# Scrapy's log level: DEBUG, INFO, WARNING, ERROR.
LOG_LEVEL = "INFO"
# Scrapy's log lines; crawlhub's also notes an unhandled download failure (one raised in a downloader
# middleware's process_response included) on its request, for the dead letter's reason.
LOG_FORMATTER = "crawlhub.logformatter.LogFormatter"

# --- Browser: headless Chromium through scrapy-playwright (docs/browser.md) ---
# Spiders with use_browser or browser_needs get the browser download handler;
# True gives it to every spider (needed for meta={"browser": True} elsewhere).
BROWSER_ENABLED = False
# Chromium to launch; empty = chromium (Debian) or chromium-browser on PATH.
CHROMIUM_PATH = ""
# Per worker: browser contexts, and pages open at once in each.
BROWSER_MAX_CONTEXTS = 2
BROWSER_MAX_PAGES_PER_CONTEXT = 4
# Seconds for a page's navigation (then an ordinary retry, then the DLQ: "browser timeout").
BROWSER_TIMEOUT = 30.0
# Seconds for Chromium to start (its own budget: a slow start on a loaded machine is not the page's fault;
# a start that fails is a retry, then the DLQ with the reason "browser did not start").
BROWSER_LAUNCH_TIMEOUT = 60.0
# Resource types the browser does not load (Playwright's resource_type names).
BROWSER_ABORT_RESOURCES = ["image", "font", "media"]
# browser_needs fallback: a domain whose plain pages lack the data this often
# (and at least BROWSER_MARK_MIN_FALLBACKS times) is rendered directly by every worker.
BROWSER_MARK_RATIO = 0.5
BROWSER_MARK_MIN_FALLBACKS = 1
# Seconds between a worker's reads of the domains that need the browser.
BROWSER_DOMAINS_REFRESH = 5.0

# --- The ladder: plain -> impersonate -> browser, per domain (docs/anti-blocking.md) ---
# The impersonate rung: curl_cffi with a real browser's TLS ClientHello and HTTP/2 settings (the
# "impersonate" extra). The target follows the request's User-Agent family (IMPERSONATE_TARGETS);
# IMPERSONATE_TARGET where it has none. False: no impersonate rung (plain, then the browser if any).
IMPERSONATE_ENABLED = True
IMPERSONATE_TARGET = "chrome"
IMPERSONATE_TARGETS = {"chrome": "chrome", "edge": "edge", "firefox": "firefox", "safari": "safari"}
# A domain climbs a rung after LADDER_CLIMB_AFTER blocked answers on its rung (across the cluster):
# a status in LADDER_BLOCK_CODES, or a ban marker (PROXY_BAN_MARKERS, the spider's ban_markers). A
# blocked page is fetched again a rung higher at once. After LADDER_PROBE_AFTER seconds one request
# probes the rung below (doubling on each failed probe, up to LADDER_PROBE_MAX): cheap again when the
# site relaxes. A spider pins a rung with its `rung` attribute, a request with meta["rung"].
LADDER_ENABLED = True
LADDER_BLOCK_CODES = [403]
LADDER_CLIMB_AFTER = 3
LADDER_PROBE_AFTER = 600.0
LADDER_PROBE_MAX = 86400.0
# Seconds a worker trusts its copy of the domains' rungs (crawlhub:ladder) before reading Redis again.
LADDER_REFRESH = 5.0

# --- Workers with roles (docs/anti-blocking.md, "Workers with roles") ---
# The rungs this worker takes work for: some of plain, impersonate, browser. Empty: the rungs it can run
# (the browser with BROWSER_ENABLED or a spider with use_browser; impersonate with curl_cffi). Work that
# needs a rung (a pin, meta["browser"], its domain's rung) waits in its domain's lane for that rung,
# leased only by workers that take it; a worker without the rung never runs it. Set, the worker runs
# the handlers of its rungs and no others (a plain worker never starts Chromium).
WORKER_CAPABILITIES: list[str] = []

# --- Sessions shared by the cluster (docs/anti-blocking.md, "Sessions") ---
# On for a spider that defines `login(session)` or sets `use_sessions = True` (or with SESSIONS_ENABLED):
# each request goes out in one of SESSION_POOL_SIZE sessions (a cookie jar in Redis bound to a proxy and a
# header profile); `login` runs once per session, in one worker, and again when the spider's
# `session_expired(response)` says the site ended it. A session ends after SESSION_MAX_AGE seconds or
# SESSION_MAX_USES requests (0: never), and at its first answer with a status in SESSION_BAN_CODES or a ban
# marker. A login has SESSION_LOGIN_TIMEOUT seconds (other workers wait for it that long at most); after
# SESSION_LOGIN_FAILURES failed logins in a row, requests go back to the frontier as retries (then to the
# dead-letter list) instead of starting new sessions. A page whose session expires again right after a login
# SESSION_MAX_RELOGINS times in a row is retried the same way. A worker reads the pool's list again every
# SESSION_REFRESH seconds (a session's cookies: whenever their version changes).
SESSIONS_ENABLED = False
SESSION_POOL_SIZE = 4
SESSION_MAX_AGE = 3000.0
SESSION_MAX_USES = 50
SESSION_BAN_CODES = [401, 403, 429]
SESSION_LOGIN_TIMEOUT = 60.0
SESSION_LOGIN_FAILURES = 3
SESSION_MAX_RELOGINS = 2
SESSION_REFRESH = 5.0

# --- Header profiles (docs/anti-blocking.md) ----------------------------------
# Every request carries one real browser's whole navigation header set
# (crawlhub/data/browser_profiles.json): "rotate" = a profile per request,
# "sticky" = one per proxy (per domain without proxies) for the whole cluster.
# Headers a spider sets itself win. A spider's header_profile attribute (or
# meta["header_profile"]) may name a policy, a profile id, or False.
HEADER_PROFILES_ENABLED = True
HEADER_PROFILES_POLICY = "rotate"
# Narrow the choice: families chrome, edge, firefox, safari; os windows, macos, linux (empty = all).
HEADER_PROFILES_FAMILIES: list[str] = []
HEADER_PROFILES_OS: list[str] = []
# One profile id for every request (`crawlhub profiles list`); empty = choose.
HEADER_PROFILES_PIN = ""
# Another profile file (same format; `crawlhub profiles check FILE` validates it); empty = the bundled one.
HEADER_PROFILES_FILE = ""

# --- Proxies (docs/anti-blocking.md) ----------------------------------------
# Pools by provider or type, cheapest first: {"datacenter": ["http://user:pw@host:port", ...],
# "residential": [{"url": "...", "country": "de"}]} (JSON in the environment), and/or a
# file with one proxy per line: URL [pool=NAME] [country=CC] [name=ID]. Empty = no proxies.
PROXY_POOLS: dict[str, Any] = {}
PROXY_FILE = ""
# Escalation order of the pools (empty = the order they are declared in).
PROXY_TIERS: list[str] = []
# round_robin, random, or sticky (one proxy per domain for the whole cluster while it is healthy).
PROXY_ROTATION = "round_robin"
# A proxied answer with one of these codes, or a body with one of these
# markers (case-insensitive; a spider's ban_markers add to them), or a
# connection error is a failure of the proxy on that domain.
PROXY_BAN_CODES = [403, 407, 429, 503]
PROXY_BAN_MARKERS: list[str] = []
# Failures in a row (per proxy and domain) before the proxy cools down on the domain
# for PROXY_COOLDOWN seconds, doubling with each further failure up to PROXY_COOLDOWN_MAX.
PROXY_BAN_AFTER = 2
PROXY_COOLDOWN = 60.0
PROXY_COOLDOWN_MAX = 3600.0
# Failures in a row on any domain that make a proxy dead for PROXY_COOLDOWN_MAX seconds.
PROXY_DEAD_AFTER = 10
# Cool-downs in a pool after which a domain moves to the next pool, for PROXY_TIER_TTL seconds.
PROXY_ESCALATE_AFTER = 3
PROXY_TIER_TTL = 86400
# Immediate re-fetches of a page through another proxy (not attempts of the page).
PROXY_MAX_SWITCHES = 5
# Seconds a worker trusts its copy of a domain's proxy state before reading Redis again.
PROXY_STATE_REFRESH = 1.0

# --- Items ----------------------------------------------------------------
# Clean, validate, drop a page's duplicates, store in MongoDB (a project's own pipelines are merged in).
ITEM_PIPELINES = {
    "crawlhub.pipelines.clean.CleanPipeline": 100,
    "crawlhub.pipelines.validate.ValidatePipeline": 200,
    "crawlhub.pipelines.dedupe.DedupePipeline": 300,
    "crawlhub.pipelines.mongo.MongoPipeline": 800,
}
# DedupePipeline drops an item one page fetch yielded twice; it remembers the
# item keys of this many recent pages (never across pages or crawl rounds:
# MongoDB's unique key makes those one document).
DEDUPE_PAGES = 1000
# Longer texts in an item are cut here at clean time (logged, counted); 0 = no cap.
# MongoDB refuses documents over 16 MB: such a document is quarantined, described.
ITEM_FIELD_MAX_CHARS = 1000000
# A key field holding an http(s) URL is stored in its canonical form (the query's arguments sorted, an in-page
# anchor dropped: crawlhub.pipelines.clean.canonical_key_url), the form the frontier's fingerprint reads, so a
# page linked two ways is one document. `crawlhub canonicalize-keys` moves documents stored before to it.
ITEM_KEY_URLS_CANONICAL = True
# Currency assumed when a price shows none (ISO 4217); empty = none.
DEFAULT_CURRENCY = ""
# Bulk upserts are flushed at this many items or this many seconds.
MONGO_BATCH_SIZE = 100
MONGO_FLUSH_INTERVAL = 2.0
# Where items that ValidatePipeline rejected or MongoDB refused are kept, with every reason (docs/quality.md).
MONGO_QUARANTINE_COLLECTION = "quarantine"
# Flush tries at close, within MONGO_CLOSE_TIMEOUT seconds in all, before unsaved items go
# to CRAWLHUB_HOME/unsaved/ (deploy/ gives a worker 60 s to stop: it must be done well before)
MONGO_CLOSE_RETRIES = 5
MONGO_CLOSE_TIMEOUT = 20.0
# Items buffered while MongoDB is down before the worker waits for it.
MONGO_BUFFER_MAX = 1000
# Milliseconds pymongo looks for a server before a call fails.
MONGO_SERVER_SELECTION_TIMEOUT_MS = 10000
# `scrapy crawl` checks that MONGO_URI answers before it fetches anything. 0: if it does not, one WARNING line
# says so and the worker starts anyway (items wait, their pages keep their leases, until MongoDB answers: an
# outage is ridden through); > 0: wait up to this many seconds, then one line and exit code 2.
MONGO_STARTUP_WAIT = 0.0

# --- Continuous crawling: a spider's `revisit` / `revisit_rules` (docs/revisit.md) ---
# The URL status store: one document per fetched URL of a revisiting spider.
STATUS_COLLECTION = "url_status"
# The change history: when a stored item changes, a record per changed field (key, field,
# old, new, when, page); "" = none.
CHANGES_COLLECTION = "changes"
# Bounds of the adaptive schedule (seconds; a spider's revisit_min / revisit_max win).
REVISIT_MIN_INTERVAL = 60
REVISIT_MAX_INTERVAL = 2592000
# An unchanged page waits (1 + INC) times longer next time, a changed one (1 - DEC) times as long.
REVISIT_INC_RATE = 0.2
REVISIT_DEC_RATE = 0.2
# A queued revisit that never got fetched (lost) is due again after this many seconds.
REVISIT_REQUEUE_AFTER = 86400
# An item its page's revisit no longer shows: 0 marks it gone then (gone_at); a duration ("10m") makes it wait
# that long first (missing_since, gone_due), so that an item moved to another page (a product added or removed
# before it on a listing shifts the rest) is seen there before anything says it went. A spider's
# `revisit_gone_delay` wins.
REVISIT_GONE_DELAY = 0.0
# How often a worker looks for due pages (only the holder of the refresher lock moves them),
# how many per batch, and how long the lock outlives a refresher that died.
REFRESH_INTERVAL = 5.0
REFRESH_BATCH = 500
REFRESH_LOCK_TTL = 30.0

# --- Set by crawlhub itself --------------------------------------------------
# The names the environment overrode (names only: some values are secrets); set by the add-on.
CRAWLHUB_ENV_OVERRIDES: list[str] = []
