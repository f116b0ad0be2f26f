"""Requests as compact JSON: the only form in which a request crosses Redis.

Pickle is never used: a pickle read from a shared server is remote code
execution. Decoding is strict: the payload must be a JSON object with a
string http(s) URL, the request class must be on an allowlist, callbacks must
be public methods of the spider, and anything else is refused with a
:class:`DecodeError` that says why.

Fields equal to the Request defaults are left out, so a plain GET with a small
meta is a few dozen bytes.
"""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Iterable
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict

from crawlhub import meta

DEFAULT_ALLOWED_CLASSES = (
    "scrapy.http.request.Request",
    "scrapy.http.request.form.FormRequest",
    "scrapy.http.request.json_request.JsonRequest",
)
# Request attribute -> its default; equal values are not written.
_DEFAULTS: dict[str, Any] = {
    "method": "GET",
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
    "callback": None,
    "errback": None,
}
# JSON types of the fields a payload may carry
_TYPES: dict[str, type | tuple[type, ...]] = {
    "method": str, "meta": dict, "cb_kwargs": dict, "headers": dict, "cookies": (dict, list),
    "flags": list, "priority": int, "dont_filter": bool, "encoding": str, "body": str,
}
# A proxy chosen by crawlhub.proxies is per download: its address and
# credentials (meta, Proxy-Authorization) never go into Redis.
PROXY_CHOSEN = meta.PROXY
PER_DOWNLOAD_META = meta.PER_DOWNLOAD
MAX_PAYLOAD = 1 << 20  # 1 MiB: a request larger than this is not a request


class DecodeError(ValueError):
    """A payload from Redis that is not a request we are willing to build."""


class EncodeError(ValueError):
    """A request that cannot be written as JSON (say, an object in its meta)."""


class RequestSerializer:
    """Encode/decode requests for a given spider.

    ``allowed_classes`` are the dotted paths a payload's ``_class`` may name.
    """

    def __init__(self, spider: Spider | None = None, allowed_classes: Iterable[str] = DEFAULT_ALLOWED_CLASSES) -> None:
        self.spider = spider
        self.allowed = set(allowed_classes)

    # -- encode ----------------------------------------------------------
    def encode(self, request: Request) -> bytes:
        try:
            d = request.to_dict(spider=self.spider)
        except ValueError as exc:  # a callback or errback that is not a method of the spider
            raise EncodeError(
                f"request {request.url} cannot be stored as JSON: {exc} (use a method of the spider as "
                f"callback/errback, by name, so that any worker can run it)"
            ) from None
        if PROXY_CHOSEN in d.get("meta", {}):
            d["meta"] = {k: v for k, v in d["meta"].items() if k not in PER_DOWNLOAD_META}
            d["headers"] = {k: v for k, v in d.get("headers", {}).items() if k.lower() != b"proxy-authorization"}
        out: dict[str, Any] = {"url": d.pop("url")}
        cls = d.pop("_class", None)
        if cls is not None:
            out["_class"] = cls
        headers = d.pop("headers", {})
        if headers:
            out["headers"] = {
                k.decode("latin-1"): [v.decode("latin-1") for v in vals] for k, vals in headers.items()
            }
        body = d.pop("body", b"")
        if body:
            out["body"] = base64.b64encode(body).decode("ascii")
        for key, value in d.items():
            if key in _DEFAULTS and value == _DEFAULTS[key]:
                continue
            out[key] = value
        try:
            return json.dumps(out, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"request {request.url} cannot be stored as JSON: {exc}") from None

    # -- decode ----------------------------------------------------------
    def decode(self, payload: bytes | str) -> Request:
        if isinstance(payload, str):
            payload = payload.encode()
        if len(payload) > MAX_PAYLOAD:
            raise DecodeError(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD}")
        if payload[:1] == b"\x80":
            raise DecodeError("pickle payload refused (requests cross Redis as JSON only)")
        try:
            d = json.loads(payload)
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise DecodeError(f"expected a JSON object, got {type(d).__name__}")
        url = d.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise DecodeError(f"missing or non-http(s) url: {str(url)[:200]!r}")
        cls_path = d.get("_class")
        if cls_path is not None and cls_path not in self.allowed:
            raise DecodeError(f"request class {str(cls_path)[:200]!r} is not in FRONTIER_REQUEST_CLASSES")
        for name in ("callback", "errback"):
            self._check_method(d.get(name), name)
        for name, kind in _TYPES.items():
            if name in d and (not isinstance(d[name], kind) or (kind is int and isinstance(d[name], bool))):
                raise DecodeError(f"{name} must be a JSON {getattr(kind, '__name__', 'dict or list')}")
        if "body" in d:
            try:
                d["body"] = base64.b64decode(d["body"], validate=True)
            except (ValueError, TypeError) as exc:
                raise DecodeError(f"body is not base64: {exc}") from None
        if cls_path is not None:
            # Allowed paths only: load_object() imports, so it never sees a
            # path we did not list.
            load_object(cls_path)
        try:
            return request_from_dict(d, spider=self.spider)
        except (TypeError, ValueError, AttributeError, LookupError) as exc:
            raise DecodeError(f"cannot rebuild request: {exc}") from None

    def _check_method(self, name: object, what: str) -> None:
        if name is None:
            return
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise DecodeError(f"{what} {str(name)[:100]!r} is not a public method name")
        if self.spider is not None:
            method = getattr(self.spider, name, None)
            if not inspect.ismethod(method):
                raise DecodeError(f"{what} {name!r} is not a method of spider {self.spider.name!r}")
