"""The edges of what a user types (issue #28): `crawlhub export` destinations and formats, the CLI outside a
project, `scrapy genspider`'s templates, exit codes as docs/cli.md lists them. Every test is written from the
user's side: the command as typed, its output and exit code, and the state of the file, device or key after."""


from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading

import pytest

from tests.harness import ROOT, SCRAPY, cli, start_ui
from tests.unit.test_cli_edges import documented_codes

ITEMS = 300




def check_code(command: str, done: subprocess.CompletedProcess, expected: int) -> None:
    """``done`` exited ``expected``, one of the codes docs/cli.md lists for ``command``, with no traceback."""
    assert done.returncode == expected, f"crawlhub {command} exited {done.returncode}, not {expected}:\n{done.stderr[-2000:]}"
    assert expected in documented_codes()[command], f"docs/cli.md does not list {expected} for crawlhub {command}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def stored_products(mongo_db, count: int = ITEMS) -> None:
    mongo_db.products.insert_many([{"id": str(n), "name": f"item {n}", "price": f"{n}.00", "spiders": ["scrapeme"]}
                                   for n in range(count)])


def test_export_streams_to_fifos_and_symlinks_and_replaces_only_regular_files(env, mongo_db, tmp_path):
    stored_products(mongo_db)

    def read_all(path, into: list) -> threading.Thread:
        def run():
            with open(path, "rb") as pipe:
                into.append(pipe.read())

        reader = threading.Thread(target=run, daemon=True)
        reader.start()
        return reader

    fifo = tmp_path / "items"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = read_all(fifo, got)
    done = cli(env, "export", "scrapeme", "-o", str(fifo))
    reader.join(30)
    check_code("export", done, 0)
    assert len(got[0].decode().splitlines()) == ITEMS and json.loads(got[0].splitlines()[0])["id"] == "0"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO is still a FIFO, not a file put in its place"
    assert not list(tmp_path.glob("*.part"))

    link = tmp_path / "through.csv"
    link.symlink_to(fifo)
    got = []
    reader = read_all(fifo, got)
    check_code("export", cli(env, "export", "scrapeme", "-o", str(link), "--fields", "id,name"), 0)
    reader.join(30)
    rows = got[0].decode().splitlines()
    assert rows[0] == "id,name" and len(rows) == ITEMS + 1, "CSV from the link's extension, through the pipe"
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(fifo).st_mode)

    # a symlink to the process's own standard output (a pipe here): every item reaches the pipe
    to_stdout = tmp_path / "stdout.jsonl"
    to_stdout.symlink_to("/proc/self/fd/1")
    done = cli(env, "export", "scrapeme", "-o", str(to_stdout))
    check_code("export", done, 0)
    assert len(done.stdout.splitlines()) == ITEMS and to_stdout.is_symlink()
    assert len(cli(env, "export", "scrapeme", "-o", "-").stdout.splitlines()) == ITEMS

    # a regular file is replaced whole, once complete; a symlink to one keeps the link and replaces its target
    target = tmp_path / "kept.jsonl"
    target.write_text("old\n")
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(target)
    check_code("export", cli(env, "export", "scrapeme", "-o", str(alias)), 0)
    assert alias.is_symlink() and len(target.read_text().splitlines()) == ITEMS
    # Scrapy's FILE:FORMAT
    check_code("export", cli(env, "export", "scrapeme", "-o", f"{tmp_path / 'items.txt'}:csv"), 0)
    assert (tmp_path / "items.txt").read_text().startswith("id,name,price")


@pytest.mark.skipif(os.geteuid() != 0, reason="making a character device node (mknod) needs root")
def test_export_to_a_full_device_fails_with_one_line_and_leaves_the_device(env, mongo_db, tmp_path):
    stored_products(mongo_db)
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # the kernel's "full" device, made in the test's directory
    done = cli(env, "export", "scrapeme", "-o", str(full))
    check_code("export", done, 1)
    assert "No space left on device" in done.stderr and "exported" not in done.stderr
    assert stat.S_ISCHR(os.stat(full).st_mode), "the device is still a device"


def test_export_refuses_bad_destinations_formats_fields_and_spiders_before_writing(env, mongo_db, tmp_path):
    stored_products(mongo_db)
    folder = tmp_path / "out"
    folder.mkdir()
    cases = [
        (["-o", str(folder)], "is a directory"),
        (["-o", str(tmp_path / "nope" / "x.csv")], "does not exist"),
        (["-o", str(tmp_path / "x.parquet")], "unrecognized output format 'parquet'"),
        (["-o", str(tmp_path / "x")], "no extension"),
        (["-o", str(tmp_path / "x.pickle")], "Python-only"),
        (["-o", str(tmp_path / "x.csv"), "--fields", "id,nosuchfield"], "'nosuchfield': no exported item has it"),
        (["-o", str(tmp_path / "y.csv"), "--fields", "id,first_seen"], "--meta"),
    ]
    for args, said in cases:
        done = cli(env, "export", "scrapeme", *args)
        check_code("export", done, 2)
        assert said in done.stderr, (args, done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not list(folder.iterdir()), "nothing written"

    unknown = cli(env, "export", "nosuch", "-o", str(tmp_path / "n.jsonl"))
    check_code("export", unknown, 2)
    assert "no spider 'nosuch'" in unknown.stderr
    nothing = cli(env, "export", "quotes", "-o", str(tmp_path / "q.jsonl"))
    check_code("export", nothing, 1)
    assert "nothing to export" in nothing.stderr and not (tmp_path / "q.jsonl").exists()


def test_outside_a_project_the_cli_says_so_and_starts_no_server(env, tmp_path):
    away = tmp_path / "elsewhere"
    away.mkdir()
    bare = {k: v for k, v in env.items() if k not in ("REDIS_URL", "MONGO_URI", "CRAWLHUB_HOME", "SCRAPY_SETTINGS_MODULE")}
    bare["PYTHONPATH"] = str(ROOT)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "crawlhub.cli", *args], cwd=away, env=bare, capture_output=True,
                              text=True, timeout=60)

    for args, command in ((["status"], "status"), (["export", "scrapeme"], "export"), (["services", "up"], "services up"),
                          (["seed", "scrapeme", "https://127.0.0.1:1/"], "seed")):
        done = run(*args)
        check_code(command, done, 2)
        assert "no Scrapy project here" in done.stderr and "scrapy.cfg" in done.stderr, done.stderr
    assert list(away.iterdir()) == [], "no .crawlhub/ (and no server) made outside the project"
    version = run("--version")
    assert version.returncode == 0 and re.match(r"crawlhub \d+\.\d+", version.stdout) and "Scrapy 2." in version.stdout


def test_a_steering_command_and_the_health_check_load_neither_the_store_driver_nor_the_ui(env):
    """`crawlhub pause` (the steering commands) and `crawlhub health` (every container's health check, each 30 s)
    import only what they run (crawlhub.cli.COMMANDS), the spider's settings included: not pymongo, the web UI's
    aiohttp, the export's writers or the impersonating download handler (0.35 s of the command's 1.3 s of CPU)."""
    heavy = ("pymongo", "aiohttp", "crawlhub.export", "crawlhub.ui", "crawlhub.cli.export", "crawlhub.impersonate")
    for args, said in ((["pause", "scrapeme"], "scrapeme paused"),
                       (["health", "scrapeme", "--any-host"], "unhealthy: no worker of scrapeme")):
        probe = ("import sys; from crawlhub.cli import main\n"
                 f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
                 f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
        done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert said in done.stdout + done.stderr, (done.stdout, done.stderr)
        assert done.stdout.strip().splitlines()[-1] == "[]", (args, done.stdout)


def test_genspider_offers_scrapys_templates_and_crawlhubs_typed_one(env, tmp_path):
    listed = subprocess.run([*SCRAPY, "genspider", "--list"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert set(listed.stdout.split()) >= {"basic", "crawl", "csvfeed", "xmlfeed", "crawlhub"}, listed.stdout
    here = {**env, "SCRAPY_SETTINGS_MODULE": "crawlhub.settings", "PYTHONPATH": str(ROOT)}

    def gen(*args):
        return subprocess.run([*SCRAPY, "genspider", "-s", "NEWSPIDER_MODULE=", *args], cwd=tmp_path, env=here,
                              capture_output=True, text=True, timeout=60)

    assert gen("foo", "example.com").returncode == 0 and "scrapy.Spider" in (tmp_path / "foo.py").read_text()
    assert gen("-t", "crawl", "bar", "example.com").returncode == 0 and "CrawlSpider" in (tmp_path / "bar.py").read_text()
    missing = gen("-t", "nosuch", "baz", "example.com")
    assert missing.returncode == 2 and "basic" in missing.stdout and not (tmp_path / "baz.py").exists()

    assert gen("-t", "crawlhub", "books", "books.example").returncode == 0
    import importlib.util

    from itemadapter import ItemAdapter
    from scrapy.http import HtmlResponse

    from crawlhub.items import Page, item_meta

    spec = importlib.util.spec_from_file_location("generated_books", tmp_path / "books.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    from scrapy import Request

    response = HtmlResponse("https://books.example/", body=b"<title>Books</title>", encoding="utf-8",
                            request=Request("https://books.example/"))

    (item,) = [x for x in module.BooksSpider().parse(response) if not isinstance(x, Request)]
    assert not isinstance(item, Page) and type(item).__name__ == "BooksSpiderItem"
    assert ItemAdapter(item).asdict() == {"url": "https://books.example/", "title": "Books",
                                          "source_url": "https://books.example/"}
    assert item_meta(item).collection == "books"


def test_the_ui_refuses_a_short_token_and_comes_with_its_first_state(env, redis_client, tmp_path):
    short = cli({**env, "CRAWLHUB_UI_TOKEN": "abcde"}, "ui", "--port", "1")
    check_code("ui", short, 2)
    assert "at least 16" in short.stderr
    import time

    from tests.harness import http

    # two spiders with state; the one with a live worker is the page's first
    redis_client.lpush("generic:start_urls", "https://127.0.0.1:1/")
    redis_client.hset("scrapeme:workers", "w:1", json.dumps({"worker": "w:1", "state": "running", "started_at": time.time(),
                                                             "last_beat": time.time(), "pages": 7}))
    redis_client.set("scrapeme:partitions", "1")
    ui, base = start_ui(env, tmp_path)
    status, _, body = http(base + "/")
    assert status == 200
    (block,) = re.findall(rb'<script id="initial" type="application/json">(.*?)</script>', body, flags=re.S)
    initial = json.loads(block)
    assert initial["default"] == "scrapeme" and initial["status"]["spider"] == "scrapeme"
    assert initial["status"]["workers_alive"] == 1
    assert json.loads(http(base + "/api/spiders")[2])["default"] == "scrapeme"
