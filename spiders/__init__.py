"""One module per domain; each spider is a few lines on crawlhub.spider.CrawlhubSpider."""
