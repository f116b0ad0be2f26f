"""The frontier's queue and duplicate filters on a real Redis: order, dedup, batching."""


from __future__ import annotations

import hashlib

import pytest
from scrapy.settings import Settings

from crawlhub.frontier.dupefilter import BloomFilter, ExactFilter, make_filter
from tests.helpers import project_settings


def test_fingerprints_spread_over_buckets():
    f = ExactFilter("df", 16)
    keys = {f.spec(hashlib.sha1(str(i).encode()).digest())[1] for i in range(400)}
    assert len(keys) == 16
    assert f.spec(b"\xff" * 20)[2] == "-1", "the first 64 bits, as a signed integer"


def test_bad_dupefilter_settings():
    with pytest.raises(ValueError, match="DUPEFILTER_MODE"):
        make_filter(None, Settings(project_settings(DUPEFILTER_MODE="fuzzy")), "df")
    with pytest.raises(ValueError, match="bits"):
        BloomFilter("df", 10**10, 0.0001)
