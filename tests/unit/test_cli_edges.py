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
