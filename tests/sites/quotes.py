"""A local copy of quotes.toscrape.com's markup: N pages of quotes with "Next"."""

from __future__ import annotations

import html


def quote_pages(pages: int = 3, per_page: int = 4) -> dict[str, str]:
    out = {}
    for page in range(1, pages + 1):
        quotes = []
        for i in range(per_page):
            n = (page - 1) * per_page + i
            tags = "".join(f'<a class="tag" href="/tag/t{t}/page/1/">t{t}</a>' for t in range(n % 3))
            quotes.append(
                f"""<div class="quote" itemscope itemtype="http://schema.org/CreativeWork">
        <span class="text" itemprop="text">“Quote number {n}, said {html.escape('<' + str(n) + '>')}.”</span>
        <span>by <small class="author" itemprop="author">Author {n % 5}</small>
        <a href="/author/Author-{n % 5}">(about)</a></span>
        <div class="tags">Tags: {tags}</div></div>"""
            )
        nxt = f'<li class="next"><a href="/page/{page + 1}/">Next <span aria-hidden="true">&rarr;</span></a></li>' if page < pages else ""
        body = f"""<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8"><title>Quotes to Scrape</title></head>
<body><div class="container"><div class="row"><div class="col-md-8">{''.join(quotes)}
<nav><ul class="pager">{nxt}</ul></nav></div></div></div></body></html>"""
        out[f"/page/{page}/"] = body
        if page == 1:
            out["/"] = body
    return out
