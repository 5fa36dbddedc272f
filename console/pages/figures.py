"""The remediations page's reliability figures: remediations per day as an inline SVG of stacked
bars, built with format_html (no script, nothing fetched from elsewhere), and MTTR and MTBI in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.pages.selectors import Reliability
from remediation.reliability import DayCounts

# From fleet.css's palette (an SVG fill attribute cannot read its custom properties): applied in
# green and suppressed in red as the table below the chart has them, repaired in the colour of a
# node serving its tenant.
OUTCOME_COLOURS = {"applied": "#2e9e5b", "suppressed": "#d23b3b", "pending": "#e0a526", "repaired": "#2f6fd6"}
BAR_WIDTH, BAR_GAP = 20, 6
PLOT_HEIGHT = 100
LEFT, TOP, BOTTOM = 30, 10, 20  # room for the y axis' labels, the top one's, and the dates
LEGEND_WIDTH = 80
FREQUENT_NODES = 5  # nodes listed with their mean time between incidents, most frequent first


@dataclass(frozen=True)
class DailyChart:
    svg: SafeString
    outcomes: Sequence[str]
    days: list[DayCounts]  # also the text table under the chart


def _bar(day: DayCounts, outcomes: Sequence[str], x: int, scale: float) -> SafeString:
    """One day's bar: a segment per outcome that had any, the first at the bottom."""
    said = ", ".join(f"{count} {outcome}" for outcome, count in zip(outcomes, day.counts, strict=True) if count)
    segments = []
    top: float = TOP + PLOT_HEIGHT
    for outcome, count in zip(outcomes, day.counts, strict=True):
        if count:
            height = count * scale
            top -= height
            segments.append((outcome, x, f"{top:.1f}", BAR_WIDTH, f"{height:.1f}", OUTCOME_COLOURS[outcome]))
    return format_html(
        '<g class="bar" data-day="{}" data-total="{}"><title>{}: {}</title>{}</g>',
        day.day.isoformat(),
        day.total,
        day.day.isoformat(),
        said or "none",
        format_html_join(
            "", '<rect data-outcome="{}" x="{}" y="{}" width="{}" height="{}" fill="{}"></rect>', segments
        ),
    )


def daily_chart(days: list[DayCounts], outcomes: Sequence[str]) -> DailyChart:
    """A bar per day (at least one), stacked by outcome and scaled to the busiest day, with a legend on the right."""
    busiest = max(day.total for day in days)
    scale = PLOT_HEIGHT / max(busiest, 1)
    plot_right = LEFT + len(days) * (BAR_WIDTH + BAR_GAP) - BAR_GAP
    legend_x = plot_right + 14
    width, height = legend_x + LEGEND_WIDTH, TOP + PLOT_HEIGHT + BOTTOM
    bars = format_html_join(
        "", "{}", ((_bar(day, outcomes, LEFT + i * (BAR_WIDTH + BAR_GAP), scale),) for i, day in enumerate(days))
    )
    legend = format_html_join(
        "",
        '<rect x="{}" y="{}" width="10" height="10" fill="{}"></rect><text x="{}" y="{}">{}</text>',
        (
            (legend_x, TOP + 16 * i, OUTCOME_COLOURS[outcome], legend_x + 14, TOP + 16 * i + 9, outcome)
            for i, outcome in enumerate(reversed(outcomes))  # top to bottom, as the bars stack
        ),
    )
    svg = format_html(
        '<svg class="remediations-per-day" role="img" aria-labelledby="per-day-title per-day-desc"'
        ' width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-size="11" font-family="sans-serif">'
        '<title id="per-day-title">Remediations per day by outcome, {first} to {last}</title>'
        '<desc id="per-day-desc">A stacked bar per day, {count} days; the busiest had {busiest}.'
        " The table below the chart has every number.</desc>"
        '<text x="{axis}" y="{top_label}" text-anchor="end">{busiest}</text>'
        '<text x="{axis}" y="{baseline}" text-anchor="end">0</text>'
        '<line x1="{left}" y1="{baseline}" x2="{plot_right}" y2="{baseline}" stroke="#5f6b7a"></line>'
        "{bars}{legend}"
        '<text x="{left}" y="{dates}">{first}</text><text x="{plot_right}" y="{dates}" text-anchor="end">{last}</text>'
        "</svg>",
        width=width,
        height=height,
        first=days[0].day.isoformat(),
        last=days[-1].day.isoformat(),
        count=len(days),
        busiest=busiest,
        axis=LEFT - 4,
        top_label=TOP + 9,
        baseline=TOP + PLOT_HEIGHT,
        left=LEFT,
        plot_right=plot_right,
        dates=height - 5,
        bars=bars,
        legend=legend,
    )
    return DailyChart(svg=svg, outcomes=outcomes, days=days)


def duration(delta: timedelta) -> str:
    """Its two largest units that are not zero, e.g. "2 d 5 h", "14 min 3 s", "0 s"."""
    seconds = round(delta.total_seconds())
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
    return " ".join(parts[:2])


def reliability_text(figures: Reliability) -> dict:
    """What the page says of the figures, with every duration in words."""
    repair = figures.repair
    return {
        "window_days": figures.window.days,
        "ended": repair.ended,
        "open": repair.open,
        "mttr": duration(repair.mean) if repair.mean is not None else "",
        "median": duration(repair.median) if repair.median is not None else "",
        "models": [
            {
                "gpu_model": entry.gpu_model,
                "nodes": entry.nodes,
                "incidents": entry.incidents,
                "mtbi": duration(entry.node_time_between_incidents),
            }
            for entry in figures.mtbi_per_gpu_model
        ],
        "nodes": [
            {"node": entry.node, "incidents": entry.incidents, "mtbi": duration(entry.mean_gap)}
            for entry in figures.mtbi_per_node[:FREQUENT_NODES]
        ],
    }
