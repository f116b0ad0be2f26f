"""Integration: crawlhub as a Scrapy add-on in a project made by `scrapy startproject`."""


from __future__ import annotations

import subprocess
from collections import Counter

from tests.harness import SCRAPY, start_worker, wait_all, worker_records

SPIDER = '''
from crawlhub import CrawlhubSpider


class BooksSpider(CrawlhubSpider):
    name = "books"

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        yield from self.follow_links(response, response.css("a::attr(href)").getall())
'''


def tree(pages: int, fanout: int = 3) -> dict[str, str]:
    out = {}
    for i in range(pages):
        links = "".join(f'<a href="/b/{c}">{c}</a>' for c in range(fanout * i + 1, fanout * i + fanout + 1) if c < pages)
        out[f"/b/{i}"] = f"<html><head><title>book {i}</title></head><body>{links}</body></html>"
    return out


def test_a_fresh_scrapy_project_with_the_addon_shares_one_frontier(env, site, redis_client, mongo_db, tmp_path):
    made = subprocess.run([*SCRAPY, "startproject", "bookshop"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "bookshop"
    settings = project / "bookshop" / "settings.py"
    settings.write_text(settings.read_text() + '\nADDONS = {"crawlhub.Addon": 0}\n')
    (project / "bookshop" / "spiders" / "books.py").write_text(SPIDER)

    pages = tree(40)
    shop = site(pages)
    redis_client.lpush("books:start_urls", f"{shop.url}/b/0")
    workers = [start_worker("books", env, tmp_path / "logs", f"w{i}", cwd=project, DOWNLOAD_DELAY=0) for i in range(2)]
    wait_all(workers, 120)

    fetched = Counter(shop.fetched("/b/"))
    assert set(fetched) == set(pages) and max(fetched.values()) == 1, "every page once, across both workers"
    stored = {d["url"].removeprefix(shop.url): d["title"] for d in mongo_db["items"].find()}
    assert stored == {path: f"book {path.rsplit('/', 1)[1]}" for path in pages}
    logs = [w.log() for w in workers]
    assert all("Shared frontier on Redis" in log and "crawlhub.pipelines.mongo.MongoPipeline" in log for log in logs)
    assert len(worker_records(redis_client, "books")) == 2, "both workers joined the one frontier"
    # nothing of crawlhub's project was copied: the project's settings are Scrapy's template plus one line
    assert "SCHEDULER" not in settings.read_text() and sorted(p.name for p in (project / "bookshop").iterdir()
                                                              if p.suffix == ".py") == [
        "__init__.py", "items.py", "middlewares.py", "pipelines.py", "settings.py"]
