"""The HTML of the floor's tiles and collapsed racks, built with format_html.

There are thousands of them on a large floor: Django's template engine spends some 100 µs on a
tile or a rack bar, which alone would take the 300 ms budget at 10,000 nodes; format_html takes
a few µs. Everything around them stays in the templates.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.pages.selectors import FloorView, RackView


def _title(tile: dict) -> str:
    parts = [tile["name"], tile["state"]]
    if tile["in_use_by"]:
        parts.append(tile["in_use_by"])
    if tile.get("step"):
        parts.append(f"step {tile['step']}")
    return " · ".join(parts)


def tiles_html(tiles: list[dict], *, changed: str = "") -> SafeString:
    # Every node's URL is this prefix and its name: one reverse() instead of one per tile.
    node_url = reverse("node", args=["-"])[:-1]
    return format_html_join(
        "",
        '<li><a class="tile s-{}{}" href="{}{}" data-node="{}" data-state="{}" title="{}">{}</a></li>',
        (
            (
                tile["state"],
                " changed" if tile["name"] == changed else "",
                node_url,
                tile["name"],
                tile["name"],
                tile["state"],
                _title(tile),
                tile["label"],
            )
            for tile in tiles
        ),
    )


def rack_bar_html(rack: RackView, floor_url: str) -> SafeString:
    summary = ", ".join(f"{count} {state}" for state, count in rack.segments)
    segments = format_html_join(
        "", '<span class="s-{}" style="flex-grow: {}"></span>', ((state, count) for state, count in rack.segments)
    )
    return format_html(
        '<a class="rack-bar" data-rack="{}" href="{}?rack={}" title="{}: {}">{}</a>',
        rack.name,
        floor_url,
        rack.name,
        rack.name,
        summary,
        segments,
    )


def render_racks(floor: FloorView, *, changed: str = "") -> FloorView:
    """Give each rack its HTML: a column of tiles, or a bar of counts when the floor is collapsed."""
    floor_url = reverse("floor")
    for pod in floor.pods:
        for rack in pod.racks:
            rack.html = rack_bar_html(rack, floor_url) if floor.collapsed else tiles_html(rack.tiles, changed=changed)
    floor.attention_html = tiles_html(floor.attention)
    return floor
