"""`scrapy genspider` with crawlhub's template next to Scrapy's own (basic, crawl, csvfeed, xmlfeed): the
project's TEMPLATES_DIR is searched first, then crawlhub's templates, then Scrapy's, so none hides the others. A
template that exists nowhere is an error (exit code 2), not a line and exit code 0.

It is Scrapy's ``genspider`` wherever crawlhub is installed (the ``scrapy.commands`` entry point in
pyproject.toml), so ``scrapy genspider -t crawlhub NAME DOMAIN`` works in any project, one made by
``scrapy startproject`` with the add-on included, with no TEMPLATES_DIR to set."""

from __future__ import annotations

from pathlib import Path

import scrapy
from scrapy.commands.genspider import Command as _Base

import crawlhub

SCRAPY_TEMPLATES = Path(scrapy.__path__[0], "templates", "spiders")
CRAWLHUB_TEMPLATES = Path(crawlhub.TEMPLATES_DIR, "spiders")


class Command(_Base):
    def long_desc(self) -> str:
        return super().long_desc() + " crawlhub's own template, a spider on the shared frontier with a typed item: -t crawlhub."

    def _folders(self) -> list[Path]:
        # the project's (TEMPLATES_DIR; Scrapy's when unset), crawlhub's, Scrapy's: each once, in that order
        return list(dict.fromkeys((Path(self.templates_dir), CRAWLHUB_TEMPLATES, SCRAPY_TEMPLATES)))

    def _find_template(self, template: str) -> Path | None:
        filename = template if template.endswith(".tmpl") else f"{template}.tmpl"
        for candidate in (Path(filename), *(folder / filename for folder in self._folders())):
            if candidate.exists():
                return candidate
        names = ", ".join(self._names())
        print(f"Unable to find template: {template} (the templates: {names})")
        self.exitcode = 2
        return None

    def _names(self) -> list[str]:
        found: dict[str, None] = {}
        for folder in self._folders():
            if folder.is_dir():
                found.update(dict.fromkeys(sorted(f.stem for f in folder.iterdir() if f.suffix == ".tmpl")))
        return list(found)

    def _list_templates(self) -> None:
        print("Available templates:\n" + "\n".join(f"  {name}" for name in self._names()))
