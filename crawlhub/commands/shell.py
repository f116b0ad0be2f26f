"""`scrapy shell` off the shared frontier (see crawlhub.commands)."""

from scrapy.commands.shell import Command as _Base

from crawlhub.commands import local_only

Command = local_only(_Base, __name__, DUPEFILTER_CLASS="scrapy.dupefilters.BaseDupeFilter")
