"""The building blocks of the report page: escaped text, tables, tiles, the balance chart.

Every string that comes from a dataset (a class or split name, a path, a reject's detail, a
note in the history, anything in a changes file) is untrusted: it goes through ``text``
(``printable`` for control characters and bidi overrides, then ``html.escape`` with
``quote=True``) before it is put anywhere in the page, in element text, in an attribute or in
SVG, so no name can close a tag, open one or start a script.  Only this module writes markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

from ...text import cut, printable

# Colours per split, in the order of the manifest's splits (the contact sheet's palette).
SPLIT_COLOURS = ("#3b6fb6", "#e08a2c", "#4a9a5b", "#9b59b6", "#c0392b", "#7f8c8d")
CHART_WIDTH = 360  # SVG user units: one to a CSS pixel on a phone; the chart scales
CHART_ROW = 28  # a class: its name line above a bar
CHART_NAME_CHARS = 44  # of a class name in the chart (the full name is its tooltip)

STYLE = """
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
 color:#222226;background:#fafaf8}
main{max-width:1100px;margin:0 auto;padding:16px}
h1{font-size:1.35em;margin:.2em 0;overflow-wrap:anywhere}
h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd;padding-bottom:.2em}
h3{font-size:1em;margin:1em 0 .4em}
p,li{overflow-wrap:anywhere}
.muted{color:#6e7076}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:.8em 0}
.card{background:#fff;border:1px solid #e2e2de;border-radius:6px;padding:6px 12px;min-width:0}
.card b{display:block;font-size:1.3em}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #e2e2de;border-radius:6px;
 background:#fff}
table{border-collapse:collapse;font-size:.9em;width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td.wrap{white-space:normal;overflow-wrap:anywhere;min-width:12em}
.up{color:#1e7a3a}.down{color:#b22222}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
svg.chart{display:block;width:100%;max-width:560px;height:auto}
svg.chart text{font:11px system-ui,sans-serif;fill:#222226}
svg.chart text.total{fill:#6e7076}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
figure{margin:0;background:#fff;border:1px solid #e2e2de;border-radius:6px;padding:6px;
 min-width:0}
figure img{display:block;max-width:100%;height:auto;margin:0 auto}
figcaption{font-size:.8em;overflow-wrap:anywhere;margin-top:4px}
.placeholder{display:flex;align-items:center;justify-content:center;text-align:center;
 aspect-ratio:1;background:repeating-linear-gradient(45deg,#eee,#eee 8px,#e4e4e0 8px,
 #e4e4e0 16px);color:#6e7076;font-size:.8em;padding:6px;overflow-wrap:anywhere}
.reason{color:#b22222;font-weight:600}
footer{margin:2em 0 1em;font-size:.8em}
"""


def text(value: Any) -> str:
    """``value`` as text safe anywhere in the page: element text, an attribute, SVG."""
    return html.escape(printable(str(value)), quote=True)


def number(value: Any) -> str:
    """A count with thousands separators; anything that is not an integer, as text."""
    if isinstance(value, bool) or not isinstance(value, int):
        return text(value)
    return f"{value:,}"


def delta(old: Any, new: Any) -> str:
    """``new`` with its change from ``old`` (``+3``, ``-1``), coloured."""
    if not (isinstance(old, int) and isinstance(new, int)) or old == new:
        return number(new)
    change = new - old
    kind = "up" if change > 0 else "down"
    return f'{number(new)} <span class="{kind}">({change:+,})</span>'


def page(title: str, body: Iterable[str]) -> str:
    """The whole document: inline CSS, no script, no reference outside itself."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            f"<title>{text(title)}</title><style>{STYLE}</style></head>\n<body><main>\n"
            + "\n".join(body) + "\n</main></body></html>\n")


def section(anchor: str, heading: str, parts: Iterable[str]) -> str:
    """A titled section (``anchor`` is ours, never a dataset's string)."""
    return f'<section id="{anchor}"><h2>{text(heading)}</h2>\n' + "\n".join(parts) \
        + "</section>"


def paragraph(content: str, muted: bool = False) -> str:
    """A paragraph of markup already escaped."""
    return f'<p class="muted">{content}</p>' if muted else f"<p>{content}</p>"


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Key numbers as cards: (label, value markup)."""
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{value}</b>{text(label)}</div>' for label, value in items) \
        + "</div>"


def table(head: Sequence[str], rows: Iterable[Sequence[str]],
          numeric: Sequence[bool] = ()) -> str:
    """A table in a box that scrolls sideways on its own (the page never does).  ``head`` is
    plain text; ``rows`` hold markup already escaped; ``numeric`` right-aligns columns."""
    align = list(numeric) + [False] * (len(head) - len(numeric))

    def cell(tag: str, content: str, column: int) -> str:
        kind = "num" if align[column] else ("wrap" if tag == "td" and column == len(head) - 1
                                            else "")
        return f'<{tag} class="{kind}">{content}</{tag}>' if kind else \
            f"<{tag}>{content}</{tag}>"

    header = "".join(cell("th", text(name), i) for i, name in enumerate(head))
    body = "".join("<tr>" + "".join(cell("td", content, i) for i, content in enumerate(row))
                   + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{header}</tr></thead>' \
        f"<tbody>{body}</tbody></table></div>"


def legend(splits: Sequence[str]) -> str:
    """A swatch per split, in the chart's colours."""
    return '<p class="legend">' + "".join(
        f'<span><i style="background:{SPLIT_COLOURS[i % len(SPLIT_COLOURS)]}"></i>'
        f"{text(name)}</span>" for i, name in enumerate(splits)) + "</p>"


def balance_chart(rows: Sequence[tuple[str, Sequence[int]]], splits: Sequence[str]) -> str:
    """Class x split balance as one inline SVG: per class its name and total above a bar cut
    into its splits, the bars to one scale (the largest class fills the width)."""
    largest = max((sum(counts) for _, counts in rows), default=0) or 1
    height = CHART_ROW * len(rows) + 4
    parts = [f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {height}" role="img" '
             'aria-label="samples per class and split">']
    for row, (name, counts) in enumerate(rows):
        top = row * CHART_ROW
        total = sum(counts)
        fractions = " / ".join(f"{count / total:.0%}" for count in counts) \
            if total and len(counts) > 1 else ""
        parts.append(f'<g><title>{text(name)}: {total:,}</title>'
                     f'<text x="0" y="{top + 11}">{text(cut(printable(name), CHART_NAME_CHARS))}'
                     f'</text><text class="total" x="{CHART_WIDTH}" y="{top + 11}" '
                     f'text-anchor="end">{total:,}{f" ({fractions})" if fractions else ""}'
                     "</text></g>")
        x = 0.0
        for column, count in enumerate(counts):
            width = CHART_WIDTH * count / largest
            if width > 0:
                colour = SPLIT_COLOURS[column % len(SPLIT_COLOURS)]
                parts.append(f'<rect x="{x:.2f}" y="{top + 14}" width="{width:.2f}" '
                             f'height="10" fill="{colour}"><title>{text(name)}, '
                             f"{text(splits[column])}: {count:,}</title></rect>")
            x += width
        if not total:
            parts.append(f'<rect x="0" y="{top + 14}" width="{CHART_WIDTH}" height="10" '
                         'fill="none" stroke="#ccc" stroke-dasharray="3 3"/>')
    parts.append("</svg>")
    return "".join(parts)


def tile(picture: str | None, why_not: str, caption: Sequence[str]) -> str:
    """A figure: a data-URI picture (``picture``, ours: base64) or a placeholder saying
    ``why_not`` (plain text); ``caption`` lines hold markup already escaped."""
    shown = f'<img alt="" src="{picture}">' if picture else \
        f'<div class="placeholder">{text(why_not)}</div>'
    return f"<figure>{shown}<figcaption>{'<br>'.join(caption)}</figcaption></figure>"


def tiles(items: Iterable[str]) -> str:
    """Figures in a grid that reflows from one column on a phone to many on a desktop."""
    return '<div class="tiles">' + "".join(items) + "</div>"
