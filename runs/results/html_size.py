"""What text costs on a page: the bytes it takes once escaped for HTML or quoted in a link. The
dashboard's pages bound what they show of files an agent wrote by these, not by characters: a
quote mark is six bytes on the page."""

from __future__ import annotations

import html
from urllib.parse import quote


def html_bytes(text: str) -> int:
    return len(html.escape(text).encode())


def url_bytes(text: str) -> int:
    return len(quote(text, safe="/").encode())


def fit(text: str, limit: int) -> tuple[str, bool]:
    """The longest start of `text` that takes at most `limit` bytes once escaped for HTML, and
    whether it was cut."""
    if html_bytes(text) <= limit:
        return text, False
    lo, hi = 0, max(0, min(len(text), limit))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if html_bytes(text[:mid]) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo], True
