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
