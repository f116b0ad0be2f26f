"""Integration: the package as a library. Its wheel, built from this checkout, installs with its extras into a
fresh virtual environment (nothing of this project's own), beside a new `scrapy startproject` whose settings
enable ``crawlhub.Addon``, and that project crawls a local site through the shared frontier into MongoDB."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from tests.harness import ROOT, start_worker, wait_all

SPIDER = '''
from dataclasses import dataclass
from typing import ClassVar

from crawlhub import CrawlhubSpider


@dataclass
class Book:
    collection: ClassVar[str] = "books"
    key_fields: ClassVar[tuple[str, ...]] = ("url",)
    required: ClassVar[tuple[str, ...]] = ("url", "title")

    url: str | None = None
    title: str | None = None


class BooksSpider(CrawlhubSpider):
    name = "books"

    def parse(self, response):
        yield Book(url=response.url, title=response.css("title::text").get())
        yield from self.follow_links(response, response.css("a::attr(href)").getall())
'''


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_wheel_installs_with_its_extras_and_crawls_from_a_new_project(env, site, redis_client, mongo_db, tmp_path):
    # the wheel, built from a copy of the package's files (a build writes beside its sources: not in the checkout)
    source = tmp_path / "source"
    shutil.copytree(ROOT / "crawlhub", source / "crawlhub", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
         str(source)], cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("crawlhub-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "crawlhub/py.typed" in names and "crawlhub/frontier/lua/tick.lua" in names
    assert "crawlhub/downloadermiddlewares/retry.py" in names, "every package of crawlhub is in the wheel"
    assert not [n for n in names if n.startswith(("spiders/", "tests/", "demo/", "bench/"))], "the library alone"

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", f"crawlhub[browser,metrics,ui,embedded] @ {wheel.as_uri()}"])
    # the environment has what the extras promise, and nothing of this checkout
    probe = run([python, "-c", "import crawlhub, scrapy_playwright, prometheus_client, aiohttp, pymongo, redis; "
                 "print(crawlhub.__file__)"], cwd=tmp_path)
    assert str(venv) in probe.stdout and str(ROOT) not in probe.stdout
    assert (venv / "bin" / "secantusd-py").exists() and (venv / "bin" / "crawlhub").exists()

    scrapy = str(venv / "bin" / "scrapy")
    run([scrapy, "startproject", "bookshop"], cwd=tmp_path)
    project = tmp_path / "bookshop"
    settings = project / "bookshop" / "settings.py"
    settings.write_text(settings.read_text() + '\nADDONS = {"crawlhub.Addon": 0}\n')
    (project / "bookshop" / "spiders" / "books.py").write_text(SPIDER)

    pages = {f"/b/{i}": f"<html><head><title>book {i}</title></head><body>"
             + "".join(f'<a href="/b/{c}">{c}</a>' for c in (2 * i + 1, 2 * i + 2) if c < 15) + "</body></html>"
             for i in range(15)}
    shop = site(pages)
    redis_client.lpush("books:start_urls", f"{shop.url}/b/0")
    own = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "SCRAPY_SETTINGS_MODULE", "VIRTUAL_ENV")}
    own["PATH"] = f"{venv / 'bin'}:{own.get('PATH', '')}"
    workers = [start_worker("books", own, tmp_path / "logs", f"w{i}", cwd=project, python=python, DOWNLOAD_DELAY=0)
               for i in range(2)]
    wait_all(workers, 180)

    assert sorted(shop.fetched("/b/")) == sorted(pages), "every page once, across both workers"
    stored = {d["url"].removeprefix(shop.url): d["title"] for d in mongo_db["books"].find()}
    assert stored == {path: f"book {path.rsplit('/', 1)[1]}" for path in pages}
    logs = [w.log() for w in workers]
    assert all("Shared frontier on Redis" in log and "crawlhub.pipelines.mongo.MongoPipeline" in log for log in logs)
