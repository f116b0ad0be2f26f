"""Unit tests: no servers, no subprocesses (tests/unit/conftest.py refuses both); `make test` runs them first."""
