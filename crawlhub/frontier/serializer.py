"""Requests as compact JSON: the only form in which a request crosses Redis.

Pickle is never used: a pickle read from a shared server is remote code
execution. Decoding is strict: the payload must be a JSON object with a
string http(s) URL, the request class must be on an allowlist, callbacks must
be public methods of the spider (or a CrawlSpider's rule callbacks), and
anything else is refused with a :class:`DecodeError` that says why.

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
from scrapy.spiders import CrawlSpider
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
# Private methods that Scrapy's own spiders name as callbacks: a CrawlSpider's rules send every link to
# _callback/_errback (the rule's index in meta). The only names starting with _ a payload may call.
FRAMEWORK_CALLBACKS: dict[type, frozenset[str]] = {CrawlSpider: frozenset({"_callback", "_errback"})}
MAX_PAYLOAD = 1 << 20  # 1 MiB: a request larger than this is not a request


def _method_names(cls: type) -> dict[Any, str]:
    """{function: name} for the methods (plain and class methods) that attribute lookup finds on
    ``cls`` (a name's nearest definition in the MRO; an overridden base method is not one). Read from
    the classes' ``__dict__``, so that no property or other descriptor of an instance is run."""
    names: dict[Any, str] = {}
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            func = value.__func__ if isinstance(value, classmethod) else value
            if inspect.isfunction(func):
                names.setdefault(func, name)
    return names


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
        # {function: method name} of the spider's class, and the private names it may call from Redis
        self._names = _method_names(type(spider)) if spider is not None else {}
        self._private_ok = frozenset().union(
            *(names for cls, names in FRAMEWORK_CALLBACKS.items() if isinstance(spider, cls)))

    # -- encode ----------------------------------------------------------
    def encode(self, request: Request) -> bytes:
        # Request.to_dict(spider=...) without its callback lookup: Scrapy's runs inspect.getmembers()
        # on the spider for each request (5x the rest of an encode, bench/serializer.py; and it reads every property of the spider, the
        # lazy Redis connection among them); the names are found on the spider's class instead
        d: dict[str, Any] = {
            "url": request.url,
            "callback": self._method_name(request, request.callback, "callback"),
            "errback": self._method_name(request, request.errback, "errback"),
            "headers": dict(request.headers),
        }
        for attr in request.attributes:
            d.setdefault(attr, getattr(request, attr))
        if type(request) is not Request:
            d["_class"] = f"{type(request).__module__}.{type(request).__name__}"
        request_meta = d.get("meta") or {}
        if any(k in request_meta for k in PER_DOWNLOAD_META):  # one download's: never stored
            d["meta"] = {k: v for k, v in request_meta.items() if k not in PER_DOWNLOAD_META}
            if PROXY_CHOSEN in request_meta:
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

    def _method_name(self, request: Request, func: Any, what: str) -> str | None:
        """The name under which the spider's class holds ``func`` (a method of the spider), as
        Scrapy's ``_find_method`` finds it; an :class:`EncodeError` for anything else."""
        if func is None or isinstance(func, str):
            return func
        name = self._names.get(getattr(func, "__func__", None))
        if name is None:
            raise EncodeError(
                f"request {request.url} cannot be stored as JSON: its {what} {func!r} is not a method of the spider "
                f"(use a method of the spider as callback/errback, by name, so that any worker can run it)"
            )
        if not self._callable(name):  # decode() would refuse it: stored, it could never be run
            raise EncodeError(
                f"request {request.url} cannot be stored as JSON: its {what} {name!r} is a private method "
                f"(workers call only public methods of the spider from Redis; rename it)"
            )
        return name

    def _callable(self, name: str) -> bool:
        """Whether a payload may name method ``name``: a public one, or a framework callback."""
        return not name.startswith("_") or name in self._private_ok

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
        if not isinstance(name, str) or not name.isidentifier() or not self._callable(name):
            raise DecodeError(f"{what} {str(name)[:100]!r} is not a public method name")
        if self.spider is not None:
            method = getattr(self.spider, name, None)
            if not inspect.ismethod(method):
                raise DecodeError(f"{what} {name!r} is not a method of spider {self.spider.name!r}")
