"""Data quality (#27), the logic: contracts (JSON Schema, reasons per field), the figures, the score, the
findings that open and close events, change alerts, the webhook's payloads."""


from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from crawlhub.contracts import ContractError, contract_of
from crawlhub.pipelines.validate import field_problems, problems
from crawlhub.quality import Figures, Limits, count_item, dlq_reason, findings, quarantine_reasons, score


@dataclass
class Offer:
    collection: ClassVar[str] = "offers"
    key_fields: ClassVar[tuple[str, ...]] = ("sku",)
    required: ClassVar[tuple[str, ...]] = ("sku",)

    sku: str | None = field(default=None, metadata={"schema": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$"}})
    stock: int | None = field(default=None, metadata={"schema": {"type": "integer", "minimum": 0}})
    rating: float | None = field(default=None, metadata={"schema": {"maximum": 5}, "coverage": 0.8})
    colour: str | None = field(default=None, metadata={"schema": {"enum": ["red", "blue"]}, "required": True})
    price: str | None = field(default=None, metadata={"alert": {"drop": 0.3, "rise": 1.0}})
    source_url: str | None = None


def test_a_contract_keeps_every_reason_per_field():
    assert problems(Offer(sku="AB-1", stock=3, rating=4.5, colour="red")) == []
    found = field_problems(Offer(sku="ab1", stock=-2, rating=9, colour=None))
    assert found["colour"] == ["missing colour"], "required in the field's metadata"
    assert found["sku"][0].startswith("sku: 'ab1' does not match")
    assert found["stock"] == ["stock: -2 is less than the minimum of 0"]
    assert found["rating"] == ["rating: 9 is greater than the maximum of 5"]
    assert field_problems(Offer(sku="AB-1", colour="green"))["colour"][0].startswith("colour: 'green' is not one of")
    assert quarantine_reasons(found) == ["colour missing", "rating invalid", "sku invalid", "stock invalid"]
    contract = contract_of(Offer)
    assert contract.floors == {"rating": 0.8} and contract.alerts == {"price": {"drop": 0.3, "rise": 1.0}}
    assert "source_url" not in contract.fields, "what moves on every crawl is not counted"


def test_a_schema_file_and_a_bad_contract(tmp_path):
    schema_file = tmp_path / "review.json"
    schema_file.write_text(json.dumps({"properties": {"stars": {"type": "integer", "maximum": 5}}, "required": ["stars"]}))

    @dataclass
    class Review:
        collection: ClassVar[str] = "reviews"
        key_fields: ClassVar[tuple[str, ...]] = ("id",)
        schema: ClassVar[str] = str(schema_file)
        id: str | None = None
        stars: int | None = None

    assert field_problems(Review(id="1")) == {"stars": ["missing stars"]}, "the file's required: an empty value too"
    assert field_problems(Review(id="1", stars=7)) == {"stars": ["stars: 7 is greater than the maximum of 5"]}

    @dataclass
    class Bad:
        collection: ClassVar[str] = "bad"
        key_fields: ClassVar[tuple[str, ...]] = ("id",)
        id: str | None = field(default=None, metadata={"schema": {"type": "no-such-type"}})

    with pytest.raises(ContractError, match="Bad: bad JSON Schema"):
        contract_of(Bad)

    @dataclass
    class BadFloor:
        collection: ClassVar[str] = "bad"
        key_fields: ClassVar[tuple[str, ...]] = ("id",)
        id: str | None = field(default=None, metadata={"coverage": 90})

    with pytest.raises(ContractError, match="coverage 90.0 is not a share"):
        contract_of(BadFloor)


def figures(items: int, with_price: int, pages: int = 10, per_page_items: int | None = None, invalid: int = 0,
            dlq: int = 0, pattern: str = "shop/page/*/") -> Figures:
    raw: dict[str, int] = {}
    for i in range(items):
        count_item(raw, "Product", ("name", "price"), {"name": "n", "price": "1" if i < with_price else None},
                   valid=i >= invalid)
    raw.update({"pages": pages, f"p|{pattern}|pages": pages,
                f"p|{pattern}|items": items if per_page_items is None else per_page_items * pages})
    if dlq:
        raw.update({"dlq": dlq, "d|HTTP 503": dlq})
    return Figures(raw)


def test_the_score():
    healthy = figures(100, 100)
    assert score(healthy, None, {}, 20) == 100.0
    # half the items lack a price whose baseline coverage was full; 10% invalid; 1 page of 10 broken; 10 dlq
    now = figures(100, 50, invalid=10, dlq=10)
    now.raw["broken"] = 1
    expected = 100 * 0.9 * 0.9 * (10 / 20) * ((1.0 + 0.5) / 2)
    assert score(now, healthy, {}, 20) == round(expected, 1)
    assert score(figures(100, 50), None, {"Product.price": 0.5}, 20) == 100.0, "at its floor: full marks"
    assert score(figures(100, 50), None, {}, 20) == 100.0, "nothing to hold it to"


def test_findings_open_and_close_on_the_recent_figures():
    limits = Limits(min_items=20, min_pages=5)
    floors = {"Product.price": 0.9}
    holding, healthy = findings(figures(100, 60), None, floors, limits)
    assert holding["coverage:Product.price"]["why"] == "60% of 100 Product items have price, its floor is 90%"
    assert "coverage:Product.name" in healthy
    holding, healthy = findings(figures(100, 95), None, floors, limits)
    assert "coverage:Product.price" in healthy and not holding
    # no declaration: a fall from the baseline cycle by more than the margin
    holding, _ = findings(figures(100, 70), figures(100, 100), {}, limits)
    assert holding["coverage:Product.price"]["what"] == "Product.price coverage fell"
    assert not findings(figures(100, 85), figures(100, 100), {}, limits)[0], "within the margin"
    holding, healthy = findings(figures(10, 0), None, floors, limits)
    assert not holding and not [k for k in healthy if k.startswith("coverage:")], "too few items to judge either way"
    # a kind of page that yielded items in the last cycle and yields none now
    holding, _ = findings(figures(0, 0, pages=6), figures(60, 60, pages=6), {}, limits)
    assert holding["shop/page/*/"]["kind"] == "extraction" and "none in 6 pages now" in holding["shop/page/*/"]["why"]
    # rates
    holding, _ = findings(figures(100, 100, invalid=30), None, {}, limits)
    assert holding["rate:quarantine"]["figure"] == 0.3
    holding, healthy = findings(figures(50, 50, pages=10, dlq=5), None, {}, limits)
    assert holding["rate:dlq"]["why"].startswith("33% of 15 requests dead-lettered") and "HTTP 503 x5" in \
        holding["rate:dlq"]["why"]
    assert "rate:dlq" in findings(figures(50, 50, pages=100, dlq=1), None, {}, limits)[1]


def test_dlq_reasons_are_few_kinds():
    assert dlq_reason("HTTP 503 Service Unavailable", 503) == "HTTP 503"
    assert dlq_reason("callback error: KeyError: 'x'", None) == "callback error: KeyError"
    assert dlq_reason("TimeoutError: took longer than 180.0 seconds", None) == "TimeoutError"
    assert dlq_reason("", None) == "error"


def test_change_alerts_follow_the_declared_rule():
    from scrapy.utils.test import get_crawler

    from crawlhub.extensions.quality import QualityMonitor
    from tests.helpers import project_settings

    monitor = QualityMonitor(get_crawler(settings_dict=project_settings()))
    monitor._count_item(Offer(sku="AB-1", colour="red", price="10.00"), None, valid=True)

    def change(old, new, name="price"):
        return {"collection": "offers", "key": {"sku": "AB-1"}, "field": name, "old": old, "new": new,
                "url": "https://shop.example/o/1"}

    monitor.items_changed([change("10.00", "8.00"), change("10.00", "6.50"), change("10.00", "25.00"),
                           change("10.00", "n/a"), change(None, "3"), change("4", "1", name="stock")])
    assert [(a["old"], a["new"], a["moved"]) for a in monitor.alerts] == [("10.00", "6.50", -0.35),
                                                                           ("10.00", "25.00", 1.5)]
    assert monitor.alerts[0]["why"] == "price fell 35% (10.00 -> 6.50) for {'sku': 'AB-1'}"


def test_webhook_payloads():
    from crawlhub.extensions.webhook import payload

    event = {"state": "opened", "spider": "shop", "kind": "coverage", "what": "Product.price coverage below its floor",
             "why": "60% of 100 Product items have price, its floor is 90%", "example": "https://s.example/p/2/"}
    body = json.loads(payload([event], "shop", "json"))
    assert body == {"source": "crawlhub", "spider": "shop", "events": [event]}
    text = json.loads(payload([event, {**event, "state": "closed"}], "shop", "slack"))["text"]
    first, second = text.split("\n")
    assert first.startswith(":red_circle: crawlhub shop: Product.price coverage below its floor: 60%")
    assert "e.g. https://s.example/p/2/" in first and "HEALTHY AGAIN" in second
