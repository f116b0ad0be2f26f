"""`scrapy parse` off the shared frontier (see crawlhub.commands)."""

from scrapy.commands.parse import Command as _Base

from crawlhub.commands import local_only

Command = local_only(_Base, __name__)
