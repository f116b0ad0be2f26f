"""The edges of what a user types (issue #28): `crawlhub export` destinations and formats, the CLI outside a
project, `scrapy genspider`'s templates, exit codes as docs/cli.md lists them. Every test is written from the
user's side: the command as typed, its output and exit code, and the state of the file, device or key after."""


from __future__ import annotations

import re

import click

from tests.harness import ROOT


def documented_codes() -> dict[str, set[int]]:
    """docs/cli.md's per-command table: command -> the exit codes it lists."""
    table = re.findall(r"^\| `crawlhub ([a-z -]+)` \| ([^|]+) \|$", (ROOT / "docs" / "cli.md").read_text(), flags=re.M)
    return {command: {int(code) for code in re.findall(r"(?:^|, )(\d)\b", codes)} for command, codes in table}


def test_every_command_has_its_exit_codes_in_docs_cli():
    from crawlhub.cli import main

    def commands(group: click.Group, prefix: str = "") -> list[str]:
        found = []
        for name, command in group.commands.items():
            if not isinstance(command, click.Group) or command.invoke_without_command:  # a group may be a command too
                found.append(prefix + name)
            if isinstance(command, click.Group):
                found += commands(command, f"{prefix}{name} ")
        return found

    table = documented_codes()
    assert sorted(table) == sorted(commands(main)), "docs/cli.md's table and the commands differ"
    assert all(0 in codes and 2 in codes and codes <= {0, 1, 2, 3, 4} for codes in table.values()), table


def test_each_lazily_loaded_command_is_the_one_its_name_says():
    """crawlhub.cli.COMMANDS names each command's module and attribute; what it loads answers to that name, and an
    unknown name is click's "No such command", not an import error."""
    from crawlhub.cli import COMMANDS, main

    context = click.Context(main)
    for name in COMMANDS:
        command = main.get_command(context, name)
        assert command is not None and command.name == name, (name, command)
    assert main.list_commands(context) == sorted(COMMANDS)
    assert main.get_command(context, "no-such-command") is None
    assert sorted(main.commands) == sorted(COMMANDS)
    # a command added at run time (a project's own) stands beside the listed ones
    from crawlhub.cli import Commands

    group = Commands("crawlhub")
    group.add_command(click.Command("own"))
    assert group.get_command(context, "own") is not None and "own" in group.list_commands(context)
    assert set(group.commands) == {*COMMANDS, "own"}


def done_status(alive: int) -> dict:
    """A done crawl's status (crawlhub.monitor.status.cluster_status's shape) with ``alive`` live workers."""
    now = 1_800_000_000.0
    workers = [{"worker": f"w:{n}", "state": "running", "alive": True, "pages": 9, "items": 9, "last_beat": now}
               for n in range(alive)]
    return {"spider": "scrapeme", "time": now, "state": "done", "idle_seconds": 95.0, "paused": False, "seeds": 0,
            "queued": 0, "inflight": 0, "delayed": 0, "seen": 9, "dlq": 0, "bad_seeds": 0, "bad_requests": 0,
            "budget": 0, "budget_used": 0, "pages_per_min_1m": 0.0, "pages_per_min_5m": 0.0, "eta_seconds": 0.0,
            "totals": {"requests": 9, "2xx": 9, "3xx": 0, "4xx": 0, "5xx": 0, "error": 0, "items": 9, "retries": 0},
            "latency_ms": {"p50": 8.0, "p95": 16.0}, "domains": [], "workers": workers, "workers_alive": alive,
            "workers_dead": 0, "proxies": [], "proxy_tiers": {}}


def test_the_done_line_advises_stopping_workers_only_when_some_are_alive():
    """The "done" line said "workers wait for new seeds by design: stop them" while it showed 0 alive."""
    from crawlhub.monitor.text import format_status

    def done_line(alive: int) -> str:
        (line,) = [line for line in format_status(done_status(alive)) if line.startswith("done:")]
        return line

    none = done_line(0)
    assert "1m35s" in none and "no worker is running" in none and "stop" not in none, none
    one = done_line(1)
    assert "1 worker is still running" in one and "stop it" in one and "MAX_IDLE_TIME_BEFORE_CLOSE" in one, one
    two = done_line(2)
    assert "2 workers are still running" in two and "stop them" in two, two


def test_a_log_status_filter_that_can_match_nothing_is_refused_saying_what_it_takes():
    from crawlhub.monitor.auditlog import BadFilter, check_status_filter, matches

    for right, entry_status in (("404", 404), ("4xx", 404), ("4XX", 404), (" 5xx ", 503), ("error", None), ("100", 100)):
        wanted = check_status_filter(right)
        assert matches({"status": entry_status, "domain": "d"}, wanted, None), right
    for wrong in ("7xx", "0xx", "99", "600", "2000", "abc", "", "x04", "٤٠٤"):
        try:
            check_status_filter(wrong)
        except BadFilter as exc:
            assert repr(wrong) in str(exc) and "404" in str(exc) and "5xx" in str(exc) and "error" in str(exc)
        else:
            raise AssertionError(f"--status {wrong!r} was taken")


def test_every_file_a_command_writes_goes_through_the_one_checked_writer():
    """A command that opened its own file (`report` did: a traceback for /nonexistent/r.html) escapes the check of
    its path and the one-line errors: every write is crawlhub.cli._output's (check_destination, opened)."""
    from crawlhub.cli import _output

    writes = re.compile(r"""(?:\bopen|click\.File|click\.open_file)\([^)]*["'][wax]b?\+?["']|\.write_(?:text|bytes)\(""")
    cli = ROOT / "crawlhub" / "cli"
    offenders = [f"{path.name}: {match.group()}" for path in sorted(cli.glob("*.py")) if path.name != "_output.py"
                 for match in writes.finditer(path.read_text())]
    assert not offenders, offenders
    assert writes.search((cli / "_output.py").read_text()), "the pattern finds the one writer's own open()"
    assert callable(_output.check_destination) and callable(_output.opened)
