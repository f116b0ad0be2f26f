"""Unit tests: no servers, no subprocesses. Each test runs with network connections, listening sockets
and new processes refused (a unit test that reaches for one fails saying so: it belongs in
tests/integration/). `make test` runs this layer first; `pytest tests/unit` alone takes seconds."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest


class NotAUnitTest(RuntimeError):
    """A unit test reached for a server or a process."""


@pytest.fixture(autouse=True)
def no_servers_no_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise NotAUnitTest(f"a unit test {what} ({args[1:2] or ''}): it belongs in tests/integration/")
        return refused

    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, refuse(f"opened a network socket: {name}"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("started a process"))
