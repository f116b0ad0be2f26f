"""`crawlhub export`: real crawls into the real MongoDB-wire server, files read back with the standard library."""


from __future__ import annotations

from datetime import datetime, timezone

from crawlhub.export import parse_since


def test_since_reads_iso_times_and_ages():
    now = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2026-11-20", now) == datetime(2026, 11, 20, tzinfo=timezone.utc)
    assert parse_since("2026-11-20T08:00Z", now) == datetime(2026, 11, 20, 8, tzinfo=timezone.utc)
    assert parse_since("2026-11-20T08:00+02:00", now) == datetime(2026, 11, 20, 6, tzinfo=timezone.utc)
    assert parse_since("90m", now) == datetime(2026, 11, 24, 10, 30, tzinfo=timezone.utc)
    assert parse_since("2d", now) == datetime(2026, 11, 22, 12, tzinfo=timezone.utc)


def test_the_format_comes_from_the_option_else_the_extension_else_jsonl():
    from crawlhub.export import format_for

    assert format_for("items.csv", None) == "csv" and format_for("items.XML", None) == "xml"
    assert format_for("items.jsonlines", None) == "jsonl" and format_for("items.ndjson", None) == "jsonl"
    assert format_for("-", None) == "jsonl" and format_for("items.txt", None) == "jsonl"
    assert format_for("items.csv", "json") == "json" and format_for("-", "jsonlines") == "jsonl"
