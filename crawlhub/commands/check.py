"""`scrapy check` off the shared frontier (see crawlhub.commands)."""

from scrapy.commands.check import Command as _Base

from crawlhub.commands import local_only

Command = local_only(_Base, __name__)
