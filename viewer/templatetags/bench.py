"""Formatting for the dashboard's templates: durations, tokens, money, bar widths, shades."""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlencode

from django import template
from django.urls import get_script_prefix, reverse
from django.utils.html import json_script
from django.utils.safestring import SafeString

from runs import events as ev

register = template.Library()


@register.filter
def dur(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "–"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    if s >= 60:
        return f"{s // 60}m {s % 60}s"
    return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"


@register.filter
def num(value: Any) -> str:
    if not isinstance(value, int | float):
        return "–"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


@register.filter
def money(value: Any) -> str:
    """Dollars: the index's are Decimal, a proxy's count or a comparison's delta float."""
    if not isinstance(value, int | float | Decimal) or isinstance(value, bool):
        return "–"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


@register.filter
def reward(value: Any) -> str:
    return "–" if not isinstance(value, int | float) else f"{value:.2f}"


@register.filter
def width(spent: Any, limit: Any) -> str:
    """A bar's width class w0..w10 for spent of limit."""
    if not isinstance(spent, int | float) or not isinstance(limit, int | float) or limit <= 0:
        return "w0"
    return f"w{min(10, max(0, round(10 * spent / limit)))}"


@register.filter
def shade(value: Any) -> str:
    return f"r{round(10 * value)}" if isinstance(value, int | float) else ""


# what reverse() leaves unquoted in a path (django.urls.resolvers: RFC 3986's sub-delimiters)
_SAFE = "!$&'()*+,;=~:@"


@lru_cache(maxsize=64)
def _trials_base(job: str, prefix: str) -> str:
    return reverse("viewer:trial", args=[job, "-"])[:-2]


@register.filter
def trial_url(trial: str, job: str) -> str:
    """The trial page's URL, as {% url 'viewer:trial' job trial %} makes it, without a reverse()
    for each of the hundreds of rows and squares a live fragment holds (reverse() is the costly
    part of such a render)."""
    if not trial or "/" in trial:  # refused by the URL's str converter: as reverse() refuses it
        return reverse("viewer:trial", args=[job, trial])
    return f"{_trials_base(job, get_script_prefix())}{quote(trial, safe=_SAFE)}/"


@register.filter
def get(mapping: Any, key: Any) -> Any:
    """mapping[key], or None (a trial's search hit, by its name)."""
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.simple_tag(takes_context=True)
def query(context: Any, **changes: Any) -> str:
    """The current query string with some parameters changed (sort, filter, page links)."""
    params = {k: v for k, v in context["request"].GET.items()}
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    return "?" + urlencode(params) if params else "?"


@register.simple_tag
def live_kinds() -> SafeString:
    """The event kinds static/viewer/live.js acts on, as the page's JSON (the one list is
    runs/events.py's): which hints refresh the grid, chart and regrades too, which may change the
    job's controls, and which refresh any open trial page."""
    kinds = {
        "finished": list(ev.FINISHED_KINDS),
        "state": list(ev.STATE_KINDS),
        "all_trials": list(ev.ALL_TRIALS_KINDS),
    }
    return json_script(kinds, "bench-kinds")
