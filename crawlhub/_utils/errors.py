"""``failure_text``: what a dead letter, a retry or a log line says of an exception."""

from __future__ import annotations


def failure_text(exc: BaseException, limit: int = 1000) -> str:
    """The exception's class and message (its class alone when it has none): never empty, at most ``limit``."""
    message = str(exc).strip()
    return (f"{type(exc).__name__}: {message}" if message else type(exc).__name__)[:limit]
