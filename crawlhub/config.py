"""Environment overrides for settings, and helpers to keep secrets out of logs.

Every setting defined in :mod:`crawlhub.default_settings` can be overridden by an
environment variable of the same name. Values are coerced to the type of the
default (bool, int, float, list, dict); strings stay strings. What each setting
accepts is checked by :mod:`crawlhub.settings_check`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingError(ValueError):
    """An environment variable could not be read as the setting's type."""


# Settings whose environment value stays text though their default is a number: durations, which the code reads
# with the revisit policy's parser (90, "90s", "10m", "6h", "1d"); crawlhub.settings_check checks them.
TEXT_FROM_ENV = frozenset({"REVISIT_MIN_INTERVAL", "REVISIT_MAX_INTERVAL", "REVISIT_GONE_DELAY"})


def coerce(name: str, raw: str, default: Any) -> Any:
    """Turn the environment string ``raw`` into the type of ``default``."""
    if name in TEXT_FROM_ENV:
        return raw
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, (list, tuple)):
            raw = raw.strip()
            if raw.startswith("["):
                return json.loads(raw)
            return [part.strip() for part in raw.split(",") if part.strip()]
        if isinstance(default, dict):
            if not raw.strip():  # set but empty (e.g. an unset variable passed on by Compose): none
                return {}
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
            return value
    except ValueError as exc:
        raise SettingError(f"environment variable {name}={raw!r}: {exc}") from None
    return raw


def apply_env_overrides(namespace: MutableMapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Override upper-case names in ``namespace`` from ``environ``.

    Returns the names that were overridden (for logging; values are not
    returned because some are secrets).
    """
    environ = os.environ if environ is None else environ
    changed = []
    for name in [n for n in namespace if n.isupper() and not n.startswith("_")]:
        if name in environ:
            namespace[name] = coerce(name, environ[name], namespace[name])
            changed.append(name)
    return changed


def redact_url(url: str | None) -> str:
    """``redis://user:secret@host:6379/0`` -> ``redis://user:***@host:6379/0``."""
    if not url:
        return str(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparseable url>"
    if parts.password is None and not (parts.username and "@" in parts.netloc):
        return url
    host = parts.hostname or ""
    if port:
        host = f"{host}:{port}"
    user = parts.username or ""
    netloc = f"{user}:***@{host}" if parts.password is not None else f"***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
