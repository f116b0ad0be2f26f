"""The unit layer's promise holds: a unit test cannot open a connection or start a process."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.unit.conftest import NotAUnitTest


def test_a_unit_test_can_reach_no_server_and_start_no_process():
    with pytest.raises(NotAUnitTest, match="belongs in tests/integration"):
        socket.create_connection(("127.0.0.1", 6379), timeout=1)
    with pytest.raises(NotAUnitTest, match="started a process"):
        subprocess.run(["true"], check=False)
