"""The settings reference, generated from crawlhub/default_settings.py when the docs site is built.

An MkDocs hook (mkdocs.yml, ``hooks:``): docs/settings.md is a short page whose placeholder line,
``<!-- settings-reference -->``, this replaces with :func:`reference_markdown`, so the reference is the
module's own text and cannot drift from it. What it reads there (the source and its comments, through
:mod:`ast`; nothing is imported):

- a setting: a top-level assignment to an upper-case name; its default: the assignment as written
  (``DOWNLOAD_MAXSIZE = 32 * 1024 * 1024``, a dict with the comments inside it);
- its description: the comment lines right above it. Settings on the lines right below it with no
  comment of their own share it (``EMBEDDED_REDIS_PORT``, ``EMBEDDED_MONGO_PORT``); a blank line ends that;
- its section: the last ``# --- Title ---`` line above it;
- the settings users set: the keys of the module's ``user_settings`` (a lower-case name, so it is not
  a setting), with a line each; the page shows them first, in that order, then the tuning ones by section.

Each setting's anchor is its name in lower case: another page links ``settings.md#domain_rate``.
In a description, a setting's name links to its entry and ``docs/X.md`` to that page.
"""

from __future__ import annotations

import ast
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SETTINGS = ROOT / "crawlhub" / "default_settings.py"
DOCS = ROOT / "docs"
PAGE = "settings.md"
PLACEHOLDER = "<!-- settings-reference -->"

_SECTION = re.compile(r"#\s*---\s*(?P<title>.*?)\s*-*\s*$")
_NAME = re.compile(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b")
_DOC_PAGE = re.compile(r"\bdocs/([\w-]+\.md)\b")
_TRAILING_DOCS = re.compile(r"\s*\(((?:[^()]*\b)?docs/[^()]*)\)$")
# the table's Default column shows the value when it is this short, else points at the entry
_SHORT_DEFAULT = 40


@dataclass(frozen=True)
class Setting:
    name: str
    # the assignment as written, and its value's part of it
    source: str
    value: str
    # the comment above it (its group's), a line of text each, "# " dropped
    comment: tuple[str, ...]
    section: str
    # the settings that share the comment, in order (this one included)
    group: tuple[str, ...]

    @property
    def anchor(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Reference:
    settings: tuple[Setting, ...]
    # the ones users set, in the order the page shows them, with a line each
    user: dict[str, str]
    # section titles in the module's order
    sections: tuple[str, ...]


def read(path: Path = DEFAULT_SETTINGS) -> Reference:
    """The settings of a default_settings module, their comments, sections and the user ones."""
    text = path.read_text()
    lines = text.splitlines()
    section_at = {number: match["title"] for number, line in enumerate(lines, 1) if (match := _SECTION.match(line))}
    found: list[tuple[str, ast.stmt, ast.expr]] = []
    user: dict[str, str] = {}
    for statement in ast.parse(text).body:
        name, value = _assignment(statement)
        if name == "user_settings" and value is not None:
            user = ast.literal_eval(value)
        elif name is not None and name.isupper() and value is not None:
            found.append((name, statement, value))
    # runs of settings on consecutive lines share the comment above the first
    groups: list[list[str]] = []
    comments: dict[str, tuple[str, ...]] = {}
    for i, (name, statement, _) in enumerate(found):
        if i and found[i - 1][1].end_lineno == statement.lineno - 1:
            groups[-1].append(name)
            comments[name] = comments[groups[-1][0]]
        else:
            groups.append([name])
            comments[name] = _comment_above(lines, statement.lineno)
    group_of = {name: tuple(group) for group in groups for name in group}
    settings = tuple(
        Setting(name=name, source="\n".join(lines[statement.lineno - 1:statement.end_lineno]),
                value=_segment(lines, value), comment=comments[name],
                section=_section_of(section_at, statement.lineno), group=group_of[name])
        for name, statement, value in found)
    sections = tuple(dict.fromkeys(s.section for s in settings))
    return Reference(settings, user, sections)


def reference_markdown(path: Path = DEFAULT_SETTINGS) -> str:
    """The reference's Markdown: the settings users set (a table, then their entries), then the rest by section."""
    reference = read(path)
    by_name = {s.name: s for s in reference.settings}
    missing = [name for name in reference.user if name not in by_name]
    if missing:
        raise ValueError(f"user_settings names settings that do not exist: {', '.join(missing)}")
    names = set(by_name)
    out = ["## Settings you set", "",
           "The few a spider or a deployment needs; the rest, further down by section, tune crawlhub's "
           "internals and have defaults that suit most crawls.", "",
           "| Setting | Default | What it is |", "| --- | --- | --- |"]
    for name, line in reference.user.items():
        value = by_name[name].value
        shown = f"`{value}`" if len(value) <= _SHORT_DEFAULT and "\n" not in value and "`" not in value \
            else f"[below](#{by_name[name].anchor})"
        out.append(f"| [`{name}`](#{by_name[name].anchor}) | {shown} | {_inline(line, names, None)} |")
    out.append("")
    user = [by_name[name] for name in reference.user]
    out += _entries(user, names)
    for title in reference.sections:
        tuning = [s for s in reference.settings if s.section == title and s.name not in reference.user]
        if not tuning:
            continue
        heading, see = _section_title(title)
        out += [f"## {heading}", ""]
        if see:
            out += [f"See {_inline(see, names, None)}.", ""]
        out += _entries(tuning, names)
    return "\n".join(out).rstrip() + "\n"


def _entries(settings: list[Setting], names: set[str]) -> list[str]:
    """One entry per run of settings that share a comment: their names, their defaults as written, the comment."""
    out: list[str] = []
    runs: list[list[Setting]] = []
    for setting in settings:
        if runs and runs[-1][-1].group == setting.group:
            runs[-1].append(setting)
        else:
            runs.append([setting])
    for run in runs:
        first, *others = run
        # the first name's anchor is the heading's; the others' are spans inside it
        extra = "".join(f'<span id="{s.anchor}"></span>' for s in others)
        title = ", ".join(f"`{s.name}`" for s in run)
        out += [f"### {extra}{title} {{ #{first.anchor} }}", "", "```python"]
        out += [s.source for s in run]
        out += ["```", ""]
        if first.comment:
            out += [_inline(" ".join(first.comment), names, {s.name for s in run}), ""]
    return out


def _inline(text: str, names: set[str], own: set[str] | None) -> str:
    """A comment as Markdown: code spans kept, the rest escaped, settings and docs pages linked."""
    parts = re.split(r"(`[^`]*`)", text)
    for i, part in enumerate(parts):
        if i % 2:  # a code span
            continue
        part = html.escape(part, quote=False)
        part = re.sub(r"([\\*\[\]|])", r"\\\1", part)
        # an underscore inside a word is never emphasis; one at a word's edge could be
        part = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", part)
        part = _NAME.sub(lambda m: _name_link(m[0], names, own), part)
        parts[i] = _DOC_PAGE.sub(_doc_link, part)
    return "".join(parts)


def _name_link(name: str, names: set[str], own: set[str] | None) -> str:
    return f"[{name}](#{name.lower()})" if name in names and (own is None or name not in own) else name


def _doc_link(match: re.Match[str]) -> str:
    page = match[1]
    return f"[docs/{page}]({page})" if (DOCS / page).is_file() else match[0]


def _section_title(title: str) -> tuple[str, str]:
    """A section's heading and the docs it cites at its end, "(docs/politeness.md)", set apart."""
    match = _TRAILING_DOCS.search(title)
    if not match:
        return title, ""
    return title[:match.start()].rstrip(" :"), match[1]


def _assignment(statement: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
            and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id, statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return statement.target.id, statement.value
    return None, None


def _segment(lines: list[str], node: ast.expr) -> str:
    """A node's source text (ast.get_source_segment, without splitting the whole file again for each)."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    # the offsets count UTF-8 bytes
    part = [line.encode() for line in lines[node.lineno - 1:node.end_lineno]]
    part[-1] = part[-1][:node.end_col_offset]
    part[0] = part[0][node.col_offset:]
    return b"\n".join(part).decode()


def _comment_above(lines: list[str], lineno: int) -> tuple[str, ...]:
    """The comment lines right above line ``lineno`` (1-based), up to a blank line or a section's title."""
    comment: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].startswith("#") and not _SECTION.match(lines[i]):
        comment.append(lines[i][1:].strip())
        i -= 1
    return tuple(reversed(comment))


def _section_of(section_at: dict[int, str], lineno: int) -> str:
    starts = [number for number in section_at if number < lineno]
    return section_at[max(starts)] if starts else "General"


# MkDocs' hook events


def on_config(config: Any) -> Any:
    # `mkdocs serve` rebuilds when the settings change
    config["watch"].append(str(DEFAULT_SETTINGS))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if PLACEHOLDER not in markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"docs/{PAGE} lost its placeholder line {PLACEHOLDER}: the settings reference goes there")
    return markdown.replace(PLACEHOLDER, reference_markdown())
