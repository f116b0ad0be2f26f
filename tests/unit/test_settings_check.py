"""Every setting crawlhub reads is checked before anything starts (crawlhub.settings_check, issue #67): one line a
problem, naming the setting, where its value came from, the value (never a password) and what it accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawlhub import config, default_settings
from crawlhub.downloadermiddlewares.proxy import ROTATIONS
from crawlhub.extensions.webhook import FORMATS
from crawlhub.frontier.dupefilter import MODES
from crawlhub.profiles import FAMILIES, OSES, POLICIES
from crawlhub.roles import RUNGS
from crawlhub.settings_check import BOUNDS, FRACTIONS, KINDS, RULES, SCRAPY_READ, check_settings, rules
from tests.harness import ROOT
from tests.helpers import settings_with


def only(settings: Settings, imports: bool = True) -> str:
    problems = check_settings(settings, imports=imports)
    assert len(problems) == 1, problems
    return problems[0]


# -- every setting has a rule ----------------------------------------------------------------------------------------
def test_every_setting_crawlhub_defines_has_a_rule():
    assert [name for name, kind in RULES.items() if kind is None] == []
    defined = {name for name in dir(default_settings) if name.isupper()}
    assert set(RULES) == defined | set(SCRAPY_READ)
    assert set(KINDS) <= set(RULES), "no rule for a setting that does not exist"
    assert not set(SCRAPY_READ) & defined, "Scrapy's settings that crawlhub sets are crawlhub's"
    numbers = {name for name in defined if type(getattr(default_settings, name)) in (int, float)}
    assert set(BOUNDS) <= numbers and {n for n in numbers if type(getattr(default_settings, n)) is int} >= FRACTIONS


def test_a_new_setting_without_a_rule_fails_the_check_above(monkeypatch):
    monkeypatch.setattr(default_settings, "NEW_TUNING_KNOB", 3, raising=False)
    monkeypatch.setattr(default_settings, "NEW_MODE", "fast", raising=False)
    assert sorted(name for name, kind in rules().items() if kind is None) == ["NEW_MODE", "NEW_TUNING_KNOB"]


def test_a_numbers_whole_or_fraction_follows_how_the_code_reads_it():
    """An int default read with getfloat (DOWNLOAD_TIMEOUT) takes a fraction; one read with getint must be whole
    (Scrapy's getint fails on "2.5" and on "2.0" alike)."""
    assert check_settings(settings_with(DOWNLOAD_TIMEOUT="0.5", ROBOTSTXT_TTL=0.5)) == []
    assert "must be a whole number" in only(settings_with(CONCURRENT_REQUESTS="2.0"))
    assert "must be a whole number" in only(settings_with(SESSION_MAX_USES=2.5))


def test_the_int_settings_that_take_fractions_are_those_the_code_reads_as_floats():
    """FRACTIONS follows the code: an int default read with getfloat only (crawlhub's code, its spiders, Scrapy's)."""
    import scrapy

    sources = [*ROOT.joinpath("crawlhub").rglob("*.py"), *ROOT.joinpath("spiders").rglob("*.py"),
               *Path(scrapy.__file__).parent.rglob("*.py")]
    text = "\n".join(path.read_text() for path in sources)
    ints = [name for name in dir(default_settings) if name.isupper() and type(getattr(default_settings, name)) is int]
    read = {name: set(re.findall(rf"\.(getint|getfloat)\(\s*[\"']{name}[\"']", text)) for name in ints}
    assert {name for name, how in read.items() if how == {"getfloat"}} == FRACTIONS, read


def test_the_defaults_pass():
    assert check_settings(settings_with()) == []
    assert check_settings(settings_with(), imports=False) == []


# -- a test per kind -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "value", "said"), [
    ("DOWNLOAD_TIMEOUT", "0", "must be more than 0"),
    ("PROXY_BAN_AFTER", "0", "must be 1 or more"),
    ("QUALITY_SCORE_MIN", 101, "must be from 0 to 100"),
    ("QUALITY_DLQ_MAX", "2", "must be from 0 to 1"),
    ("SESSION_MAX_AGE", "soon", "not a number (it must be 0 or more)"),
    ("AUDIT_LOG_MAXLEN", "lots", "not a number (it must be a whole number, 1 or more)"),
])
def test_number(name, value, said):
    assert only(settings_with(**{name: value})) == f"setting {name} = {value!r}: {said}"


def test_boolean_as_scrapy_reads_it():
    assert check_settings(settings_with(ROBOTSTXT_OBEY="false", TLS_VERIFY="1", RETRY_ENABLED=True)) == []
    assert only(settings_with(ROBOTSTXT_OBEY="maybe")).startswith(
        "setting ROBOTSTXT_OBEY = 'maybe': must be true or false")


def test_duration_as_the_revisit_policy_reads_it_from_a_setting_or_the_environment():
    good = settings_with({"REVISIT_GONE_DELAY": "10m", "REVISIT_MAX_INTERVAL": "2w"}, REVISIT_MIN_INTERVAL="90s")
    assert check_settings(good) == [] and good.get("REVISIT_GONE_DELAY") == "10m", "the environment's 10m is kept"
    assert check_settings(settings_with(REVISIT_GONE_DELAY=0)) == [] and check_settings(
        settings_with({"REVISIT_GONE_DELAY": "0"})) == []
    assert only(settings_with({"REVISIT_GONE_DELAY": "10x"})) == (
        "environment variable REVISIT_GONE_DELAY='10x': bad duration '10x': write it as 90, 90s, 15m, 6h, 1d or 2w "
        "(or 0: none)")
    assert "must be more than 0" in only(settings_with(REVISIT_MIN_INTERVAL="0"))
    # the environment keeps a duration as text: exactly the duration settings
    assert {name for name, kind in RULES.items() if kind is not None and kind.what == "duration"} == config.TEXT_FROM_ENV


@pytest.mark.parametrize("rate", ["4", "4/s", "30/m", "100/h", "0", "none", 2.5])
def test_rate_accepted(rate):
    assert check_settings(settings_with(DOMAIN_RATE=rate)) == []


def test_rate_refused_from_the_environment_or_a_setting():
    assert only(settings_with({"DOMAIN_RATE": "fast"})) == (
        "environment variable DOMAIN_RATE='fast': bad rate 'fast': write it as 5/s, 30/m, 100/h, 0.5 (per second) "
        "or none")
    assert only(settings_with(DOMAIN_RATE="-1/s")).startswith("setting DOMAIN_RATE = '-1/s': bad rate")
    # -s wins over the environment: the line names the -s value
    assert only(settings_with({"DOMAIN_RATE": "0"}, DOMAIN_RATE="fast")).startswith("setting DOMAIN_RATE = 'fast': ")


def test_json_map_domain_limits():
    fine = {"example.com": "1/s", "big.org": {"rate": "20/s", "concurrency": 16}}
    assert check_settings(settings_with(DOMAIN_LIMITS=json.dumps(fine))) == []
    assert check_settings(settings_with({"DOMAIN_LIMITS": json.dumps(fine)})) == []
    said = only(settings_with(DOMAIN_LIMITS='{"x.com":"fast"}'))
    assert said.startswith("setting DOMAIN_LIMITS = '{\"x.com\":\"fast\"}': 'x.com': bad rate 'fast'"), said
    assert "'x.com': concurrency must be 0" in only(settings_with(DOMAIN_LIMITS={"x.com": {"concurrency": -1}}))
    assert "'x.com': unknown limit field(s) ['burst']" in only(settings_with(DOMAIN_LIMITS={"x.com": {"burst": 2}}))
    assert "'x.com': invalid literal" in only(settings_with(DOMAIN_LIMITS={"x.com": {"concurrency": "many"}}))
    # not JSON (the environment's own reading already refuses it, naming the variable)
    assert only(settings_with(DOMAIN_LIMITS="{x.com: 1}")).startswith("setting DOMAIN_LIMITS = '{x.com: 1}': ")
    with pytest.raises(config.SettingError, match="environment variable DOMAIN_LIMITS="):
        settings_with({"DOMAIN_LIMITS": "{x.com: 1}"})


def test_json_map_proxy_pools_never_show_credentials():
    pools = {"dc": ["http://user:hunter2@10.0.0.1:8080", "ftp://user:hunter2@10.0.0.2:21"]}
    said = only(settings_with({"PROXY_POOLS": json.dumps(pools)}))
    assert said.startswith("environment variable PROXY_POOLS: PROXY_POOLS['dc'][1]: scheme 'ftp' is not one of"), said
    assert "hunter2" not in said and "user" not in said
    tiers = only(settings_with(PROXY_POOLS={"dc": pools["dc"][:1]}, PROXY_TIERS="dc,residential"))
    assert tiers.startswith("PROXY_TIERS names pools that are not configured: residential"), tiers
    assert check_settings(settings_with(PROXY_POOLS={"dc": pools["dc"][:1]}, PROXY_TIERS="dc")) == []


def test_json_map_redis_params_and_impersonate_targets():
    said = only(settings_with({"REDIS_PARAMS": '{"password": "hunter2", "sockettimeout": 3}'}))
    assert said.startswith("environment variable REDIS_PARAMS=(options password, sockettimeout): redis-py refuses"), said
    assert "hunter2" not in said
    assert check_settings(settings_with(REDIS_PARAMS={"socket_timeout": 3})) == []
    cluster = {"read_from_replicas": True}  # (RedisCluster's own: fine for a cluster, not for one Redis)
    assert check_settings(settings_with(REDIS_PARAMS=cluster, REDIS_CLUSTER_NODES="h1:7000,h2:7001")) == []
    assert "unexpected keyword argument 'read_from_replicas'" in only(settings_with(REDIS_PARAMS=cluster))
    said = only(settings_with(IMPERSONATE_TARGETS={"opera": "chrome"}))
    assert "its keys are browser families (chrome, edge, firefox, safari), not opera" in said
    pytest.importorskip("curl_cffi")
    assert check_settings(settings_with(IMPERSONATE_TARGETS={"chrome": "chrome120"}, IMPERSONATE_TARGET="firefox")) == []
    assert "nochrome: each family's target must be a curl_cffi target" in only(
        settings_with(IMPERSONATE_TARGETS={"chrome": "nochrome"}))


@pytest.mark.parametrize(("name", "constant"), [
    ("DUPEFILTER_MODE", MODES), ("PROXY_ROTATION", ROTATIONS), ("QUALITY_WEBHOOK_FORMAT", FORMATS),
    ("HEADER_PROFILES_POLICY", POLICIES)])
def test_choice_takes_the_values_of_the_code_that_reads_it(name, constant):
    for value in constant:
        assert check_settings(settings_with(**{name: value})) == [], value
    assert only(settings_with(**{name: "fuzzy"})) == f"setting {name} = 'fuzzy': must be one of {', '.join(constant)}"


def test_choice_lists_and_levels():
    assert check_settings(settings_with(WORKER_CAPABILITIES="plain,Browser", HEADER_PROFILES_OS=["linux"],
                                        HEADER_PROFILES_FAMILIES="firefox", LOG_LEVEL="DEBUG")) == []
    said = only(settings_with({"WORKER_CAPABILITIES": "plain,gpu"}))
    assert said.startswith("environment variable WORKER_CAPABILITIES=['plain', 'gpu']: WORKER_CAPABILITIES names gpu")
    assert all(rung in said for rung in RUNGS)
    assert only(settings_with(HEADER_PROFILES_OS="windows,beos")) == (
        f"setting HEADER_PROFILES_OS = 'windows,beos': unknown beos: a list of some of {', '.join(OSES)} (empty = all)")
    assert f"a list of some of {', '.join(FAMILIES)}" in only(settings_with(HEADER_PROFILES_FAMILIES=["opera"]))
    assert "LOG_LEVEL = 'LOUD': must be one of CRITICAL, ERROR, WARNING, INFO, DEBUG" in only(
        settings_with(LOG_LEVEL="LOUD"))
    pytest.importorskip("curl_cffi")
    assert "must be a curl_cffi target" in only(settings_with(IMPERSONATE_TARGET="netscape4"))
    assert check_settings(settings_with(IMPERSONATE_TARGET="netscape4"), imports=False) == [], \
        "the crawlhub command does not load curl_cffi"


def test_status_codes():
    assert check_settings(settings_with(RETRY_HTTP_CODES="500,503", HTTP_GONE_CODES=[404],
                                        HTTPERROR_ALLOWED_CODES=[])) == []
    assert only(settings_with(RETRY_HTTP_CODES="500,5xx")) == (
        "setting RETRY_HTTP_CODES = '500,5xx': '5xx': a list of HTTP status codes (100 to 599), JSON or comma-separated")
    assert "'999'" in only(settings_with({"PROXY_BAN_CODES": "403,999"}))


def test_urls_never_show_a_password():
    said = only(settings_with({"REDIS_URL": "localhost:6379"}))
    assert said.startswith("environment variable REDIS_URL='localhost:6379': is not a Redis URL"), said
    said = only(settings_with(REDIS_URL="redis://:hunter2@h:99999/0"))
    assert "is not a Redis URL: Port out of range" in said and "hunter2" not in said
    assert check_settings(settings_with(REDIS_URL="redis+cluster://:pw@h1:7000,h2:7001")) == []
    assert "REDIS_CLUSTER_NODES: 'h1' is not host:port" in only(settings_with(REDIS_CLUSTER_NODES="h1,h2:7001"))
    said = only(settings_with({"MONGO_URI": "mongodb://crawler:p%zz@127.0.0.1:27017/"}))
    assert said.startswith("environment variable MONGO_URI='mongodb://crawler:***@127.0.0.1:27017/': is not a MongoDB "
                           "URI"), said
    assert "p%zz" not in said
    assert check_settings(settings_with(MONGO_URI="mongodb://crawler:p%zz@127.0.0.1:27017/"), imports=False) == [], \
        "the crawlhub command does not load pymongo (the commands that read MongoDB say it when they connect)"
    said = only(settings_with({"QUALITY_WEBHOOK_URL": "ftp://hooks.example.com/T0KEN"}))
    assert said == "environment variable QUALITY_WEBHOOK_URL=(a URL to hooks.example.com): must be an http/https URL " \
                   "with a host, or empty (off)"
    assert check_settings(settings_with(QUALITY_WEBHOOK_URL="https://hooks.example.com/T0KEN")) == []


def test_names_keys_texts_and_classes():
    assert "%(spider)s" in only(settings_with(SCHEDULER_QUEUE_KEY="%(name)s:requests"))
    assert "must be a MongoDB name" in only(settings_with(MONGO_DATABASE="my.db"))
    assert "must be an ISO 4217 currency code" in only(settings_with(DEFAULT_CURRENCY="euro"))
    assert check_settings(settings_with(DEFAULT_CURRENCY="EUR", CHANGES_COLLECTION="")) == []
    assert "must be a text encoding" in only(settings_with(FEED_EXPORT_ENCODING="utf-9"))
    assert "must be an address to listen on" in only(settings_with(METRICS_ADDRESS="not an address"))
    said = only(settings_with(SCHEDULER="crawlhub.frontier.scheduler.NoSuchScheduler"))
    assert said.startswith("setting SCHEDULER = 'crawlhub.frontier.scheduler.NoSuchScheduler': cannot be imported"), said
    said = only(settings_with(ITEM_PIPELINES={"crawlhub.pipelines.nosuch.Pipeline": 300}))
    assert "'crawlhub.pipelines.nosuch.Pipeline' cannot be imported" in said
    assert check_settings(settings_with(ITEM_PIPELINES={"crawlhub.pipelines.nosuch.Pipeline": None})) == [], "off"
    assert "must be a dotted path" in only(settings_with(SCHEDULER="Scheduler"))
    assert check_settings(settings_with(SCHEDULER="crawlhub.nosuch.Scheduler"), imports=False) == [], \
        "the crawlhub command imports no worker classes"


def test_header_profiles_file_and_pin(tmp_path):
    assert "is not a profile id of the bundled profiles" in only(settings_with(HEADER_PROFILES_PIN="nope"))
    assert check_settings(settings_with(HEADER_PROFILES_PIN="nope", HEADER_PROFILES_ENABLED=False)) == []
    said = only(settings_with(HEADER_PROFILES_FILE=str(tmp_path / "none.json")))
    assert re.search(r"HEADER_PROFILES_FILE = '.*none.json': header profiles .*none.json: .*No such file", said), said


def test_every_problem_is_a_line_and_each_names_its_setting():
    problems = check_settings(settings_with({"DOMAIN_RATE": "fast", "LEASE_TTL": "0"}, DUPEFILTER_MODE="fuzzy",
                                            RETRY_HTTP_CODES="5xx"))
    assert [re.match(r"(?:environment variable |setting )([A-Z_]+)", p)[1] for p in problems] == \
        ["DOMAIN_RATE", "DUPEFILTER_MODE", "LEASE_TTL", "RETRY_HTTP_CODES"], problems
    assert all("\n" not in p for p in problems)
