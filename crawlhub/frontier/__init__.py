"""The shared frontier: one Redis-backed crawl that every worker of a spider consumes.

``scheduler.py`` is Scrapy's scheduler interface, thin over ``client.py``
(:class:`FrontierClient`, reached by any component with
:func:`frontier_of(crawler) <crawlhub.frontier.client.frontier_of>`), which
keeps its leases in ``leasebook.py``, decides retries with ``policy.py`` and
runs its timers in ``upkeep.py``. ``operations.py`` binds the Lua scripts of
``lua/`` (loaded by ``scripts.py``) to a spider's keys (``keys.py``); typed
records (``records.py``) cross that boundary. docs/architecture.md has the map.
"""
