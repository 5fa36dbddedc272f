"""The HTML of the floor's tiles and collapsed racks, built in Python.

There are thousands of them on a large floor: Django's template engine spends some 100 µs on a
tile or a rack bar, which alone would take the 300 ms budget at 10,000 nodes. A collapsed
floor's rack bars, 12,500 at 100,000 nodes, are joined here into one string a pod, each from two
pieces kept per process (its rack's and its counts', which are the same poll after poll): 5 ms
for them all where making each afresh took 2 s, on a shared machine of 2 cores under a load of
8. Everything around them stays in the templates.
"""

from __future__ import annotations

from functools import lru_cache
from html import escape

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from console.pages.selectors import FloorView
from console.pages.selectors.floor import Segments


def _title(tile: dict) -> str:
    parts = [tile["name"], tile["state"]]
    if tile["in_use_by"]:
        parts.append(tile["in_use_by"])
    if tile.get("step"):
        parts.append(f"step {tile['step']}")
    return " · ".join(parts)


def tiles_html(tiles: list[dict], node_url: str, *, changed: str = "") -> SafeString:
    """The tiles, each a link to its node: `node_url` and the node's name (one reverse() a floor).

    Escaped with the standard library's html.escape, as Django's escape() is, the same HTML
    without its lazy wrapper and SafeStrings: format_html's eight arguments took 60 µs a tile,
    this takes 2 (2 shared cores under a load of 10)."""
    return mark_safe(
        "".join(
            f'<li><a class="tile s-{escape(tile["state"])}{" changed" if tile["name"] == changed else ""}" '
            f'href="{escape(node_url)}{escape(tile["name"])}" data-node="{escape(tile["name"])}" '
            f'data-state="{escape(tile["state"])}" title="{escape(_title(tile))}">{escape(tile["label"])}</a></li>'
            for tile in tiles
        )
    )


# A bar is its rack's head, then its counts' tail: each escaped once, and kept while the process
# sees that rack or those counts.
@lru_cache(maxsize=1 << 16)
def _bar_head(rack: str, floor_url: str) -> SafeString:
    return format_html('<a class="rack-bar" data-rack="{}" href="{}?rack={}" title="{}: ', rack, floor_url, rack, rack)


@lru_cache(maxsize=1 << 12)
def _bar_tail(segments: Segments) -> SafeString:
    summary = ", ".join(f"{count} {state}" for state, count in segments)
    bar = format_html_join("", '<span class="s-{}" style="flex-grow: {}"></span>', segments)
    return format_html('{}">{}</a>', summary, bar)


def render_racks(floor: FloorView, *, changed: str = "") -> FloorView:
    """Give each rack its HTML, a column of tiles, or each pod of a collapsed floor the bars of
    its racks' counts as one string (a template's loop over thousands of racks would cost more
    than the bars)."""
    floor_url = reverse("floor")
    # Every node's URL is this prefix and its name.
    node_url = reverse("node", args=["-"])[:-1]
    for pod in floor.pods:
        for rack in pod.racks:
            rack.html = tiles_html(rack.tiles, node_url, changed=changed)
        if pod.bars:
            bars = [piece for name, counts in pod.bars for piece in (_bar_head(name, floor_url), _bar_tail(counts))]
            pod.html = mark_safe("".join(bars))  # each piece escaped
    floor.attention_html = tiles_html(floor.attention, node_url)
    return floor
