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


RENDER_JS = """(function () {
  var box = document.getElementById('quotes');
  (window.QUOTES || []).forEach(function (q) {
    var div = document.createElement('div');
    div.className = 'quote';
    var tags = q.tags.map(function (t) { return '<a class="tag" href="/tag/' + t + '/page/1/">' + t + '</a>'; }).join('');
    div.innerHTML = '<span class="text"></span><span>by <small class="author"></small>' +
      (q.author_url ? '<a href="' + q.author_url + '">(about)</a>' : '') + '</span><div class="tags">Tags: ' +
      tags + '</div>';
    div.querySelector('.text').textContent = q.text;
    div.querySelector('.author').textContent = q.author;
    box.appendChild(div);
  });
})();
"""


def quote_pages_js(pages: int = 3, per_page: int = 4, prefix: str = "/js", author_links: bool = True) -> dict[str, str]:
    """The same quotes as quote_pages, filled in by JavaScript (like quotes.toscrape.com/js/).

    Each page loads ``/static/render.js?for=<page path>``, so the site's access
    log shows which pages a browser rendered. Serve RENDER_JS there (see render_handler).
    ``author_links=False``: no "(about)" link, as on the real quotes.toscrape.com/js/.
    """
    import json
    import re

    plain = quote_pages(pages, per_page)
    out = {}
    for path, body in plain.items():
        quotes = []
        for block in re.findall(r'<div class="quote".*?</div></div>', body, flags=re.S):
            quotes.append({
                "text": html.unescape(re.search(r'itemprop="text">(.*?)</span>', block, flags=re.S).group(1)),
                "author": re.search(r'itemprop="author">(.*?)</small>', block).group(1),
                "author_url": re.search(r'<a href="(/author/[^"]+)"', block).group(1) if author_links else None,
                "tags": re.findall(r'class="tag"[^>]*>([^<]+)</a>', block),
            })
        js_path = prefix + path
        nxt = re.search(r'<li class="next"><a href="(/page/\d+/)">', body)
        nav = f'<li class="next"><a href="{prefix}{nxt.group(1)}">Next</a></li>' if nxt else ""
        data = json.dumps(quotes).replace("</", "<\\/")
        out[js_path] = f"""<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8"><title>Quotes to Scrape</title></head>
<body><div class="container"><div class="col-md-8" id="quotes"></div><nav><ul class="pager">{nav}</ul></nav>
<script>window.QUOTES = {data};</script><script src="/static/render.js?for={js_path}"></script></body></html>"""
    return out


def render_handler(site, path):
    """LocalSite handler serving RENDER_JS for every /static/render.js?for=... request."""
    if path.startswith("/static/render.js"):
        return 200, "application/javascript", RENDER_JS, {}
    return None


def rendered(site) -> list[str]:
    """Page paths a browser rendered (from the site's access log)."""
    return [h.path.split("for=", 1)[1] for h in site.hits if h.path.startswith("/static/render.js?for=")]
