"""A show's public web page, the feed's channel `<link>`: its artwork, description and author, its episodes with a
player each (newest first), and the feed's URL to copy into a podcast app.

Directories link to it and a listener without a podcast app lands on it, so it is reached like the feed, by the
feed's token and without a key (`/feeds/<token>.html`), and says exactly what the feed says: it is rendered from the
same `FeedChannel` and `FeedItem`s. It is one small HTML document with its style inline and no script; every text is
cleaned by `core.text_rules.publishable` and escaped, and its Content-Security-Policy lets it load nothing but the
show's own artwork and audio.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from api.services.podcast_feed import FeedChannel, FeedItem
from core.text_rules import publishable

# No script, no frames, no forms; images and audio from where the feed serves them.
SHOW_PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; img-src 'self' https: http:; media-src 'self' https: http:; style-src 'unsafe-inline'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",  # the page's URL holds the feed's token
}
_STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; color: #1b1b1f; }
header { display: flex; gap: 1.5rem; align-items: flex-start; flex-wrap: wrap; }
header img { width: 12rem; height: 12rem; border-radius: 0.5rem; object-fit: cover; }
h1 { margin: 0 0 0.25rem; font-size: 1.8rem; }
.by { margin: 0; color: #4a4a55; }
.notes { white-space: pre-line; }
.feed { margin: 1.5rem 0; padding: 1rem; background: #f1f1f6; border-radius: 0.5rem; }
.feed input { width: 100%; box-sizing: border-box; font: inherit; padding: 0.4rem; }
article { border-top: 1px solid #d8d8e0; padding: 1rem 0; }
article h3 { margin: 0; font-size: 1.15rem; }
article .when { margin: 0 0 0.5rem; color: #4a4a55; font-size: 0.9rem; }
audio { width: 100%; }
"""


def render_show_page(channel: FeedChannel, items: Sequence[FeedItem]) -> bytes:
    """The page's HTML (UTF-8): the same show and episodes give the same bytes."""
    title = _text(channel.title)
    artwork = "" if channel.artwork_url is None else f'<img src="{_text(channel.artwork_url)}" alt="">'
    episodes = [_episode(item) for item in sorted(items, key=lambda item: item.published, reverse=True)]
    feed = _text(channel.feed_url)
    page = f"""<!doctype html>
<html lang="{_text(channel.language)}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{title}</title>
<link rel="alternate" type="application/rss+xml" title="{title}" href="{feed}">
<style>{_STYLE}</style>
</head>
<body>
<header>
{artwork}
<div>
<h1>{title}</h1>
<p class="by">by {_text(channel.author)}</p>
</div>
</header>
<p class="notes">{_text(channel.description)}</p>
<section class="feed">
<label for="feed-url">Listen in your podcast app: add this feed's address</label>
<input id="feed-url" type="url" readonly value="{feed}">
<p><a href="{feed}">The feed (RSS)</a></p>
</section>
<section>
<h2>Episodes</h2>
{"".join(episodes) or "<p>No episodes yet.</p>"}
</section>
</body>
</html>
"""
    return page.encode("utf-8")


def _episode(item: FeedItem) -> str:
    numbers = " · ".join(
        f"{name} {value}" for name, value in (("Season", item.season), ("Episode", item.number)) if value is not None
    )
    date = f"{item.published.day} {item.published:%B %Y}"
    when = f"{numbers} · {date}" if numbers else date
    notes = f'<p class="notes">{_text(item.description)}</p>' if item.description else ""
    return f"""<article>
<h3>{_text(item.title)}</h3>
<p class="when">{when}</p>
<audio controls preload="none" src="{_text(item.enclosure_url)}"></audio>
{notes}
</article>
"""


def _text(value: str | None) -> str:
    """`value` as page text or an attribute's value: cleaned by the publishing rule, then escaped."""
    return html.escape(publishable(value or ""), quote=True)
