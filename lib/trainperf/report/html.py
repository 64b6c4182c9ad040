"""HTML pieces that report notebooks display: tables, callouts, headings, notes.

Every string that comes from data (run ids, platform and model names, file
paths, error messages) is escaped here before it reaches the page, so a
platform named ``<script>…</script>`` shows as text. Numbers are formatted
for people: thousands separators, fractions as percent, units in headers.

Fragments carry facts for the report pipeline in their display metadata
(``{"trainperf": {...}}``, see :data:`FACTS_KEY`): the report title, its
one-line headline and the inputs read, which the index page shows.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

FACTS_KEY = "trainperf"
"""Display-metadata key under which a fragment records facts for the index page."""


def esc(value: object) -> str:
    """``value`` as text safe inside HTML elements and quoted attributes."""
    return html.escape("" if _missing(value) else str(value), quote=True)


@dataclass(frozen=True)
class Fragment:
    """A piece of HTML that Jupyter displays (``text/html``, plus plain text),
    with optional facts for the pipeline in its display metadata."""

    html: str
    text: str = ""
    facts: Mapping[str, object] = field(default_factory=dict)

    def _repr_mimebundle_(self, include=None, exclude=None):  # noqa: ANN001 (IPython protocol)
        data = {"text/html": self.html, "text/plain": self.text or _strip_tags(self.html)}
        return (data, {FACTS_KEY: dict(self.facts)}) if self.facts else data

    def __add__(self, other: Fragment) -> Fragment:
        return Fragment(self.html + other.html, "\n".join(t for t in (self.text, other.text) if t),
                        {**self.facts, **other.facts})


def join(parts: Sequence[Fragment]) -> Fragment:
    """One fragment made of ``parts`` in order."""
    out = Fragment("")
    for part in parts:
        out = out + part
    return out


# --- numbers -----------------------------------------------------------------

def fmt_int(x: object) -> str:
    """Rounded to a whole number with thousands separators: ``122,599``."""
    return "–" if _missing(x) else f"{float(x):,.0f}"


def fmt_num(x: object, digits: int = 2) -> str:
    """Fixed decimals with thousands separators: ``1,102.52``."""
    return "–" if _missing(x) else f"{float(x):,.{digits}f}"


def fmt_sig(x: object, digits: int = 3) -> str:
    """``digits`` significant figures, thousands separators above 1000: ``0.0314``, ``4,010``."""
    if _missing(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def fmt_pct(x: object, digits: int = 1) -> str:
    """A fraction as percent: ``0.383`` → ``38.3 %``."""
    return "–" if _missing(x) else f"{100 * float(x):.{digits}f} %"


def fmt_times(x: object, digits: int = 2) -> str:
    """A ratio: ``3.597`` → ``3.60×``."""
    return "–" if _missing(x) else f"{float(x):,.{digits}f}×"


def fmt_seconds(x: object) -> str:
    """Seconds, 2 decimals below 10 000 s, with minutes or hours in brackets from 2 min on."""
    if _missing(x):
        return "–"
    x = float(x)
    text = f"{x:,.2f} s" if x < 10_000 else f"{x:,.0f} s"
    if x >= 7200:
        return f"{text} ({x / 3600:,.1f} h)"
    if x >= 120:
        return f"{text} ({x / 60:,.1f} min)"
    return text


def fmt_big(x: object) -> str:
    """Large counts in words: ``7.6e9`` → ``7.60 billion``."""
    if _missing(x):
        return "–"
    x = float(x)
    for size, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if abs(x) >= size:
            return f"{x / size:,.2f} {word}"
    return fmt_int(x)


def fmt_short(x: object) -> str:
    """Large counts, short: ``7.6e9`` → ``7.6 B``, ``1.2e12`` → ``1.2 T``, ``5e5`` → ``500 k``."""
    if _missing(x):
        return "–"
    x = float(x)
    for size, word in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= size:
            return f"{x / size:,.3g} {word}"
    return f"{x:,.0f}"


def fmt_usd(x: object) -> str:
    """US dollars: ``$2,160.00``."""
    return "–" if _missing(x) else f"${float(x):,.2f}"


def fmt_text(x: object) -> str:
    """Text as is; blank for missing."""
    return "" if _missing(x) else str(x)


FORMATS: dict[str, Callable[[object], str]] = {
    "int": fmt_int, "num": fmt_num, "num1": lambda x: fmt_num(x, 1), "num4": lambda x: fmt_num(x, 4),
    "sig": fmt_sig, "sig4": lambda x: fmt_sig(x, 4), "pct": fmt_pct, "times": fmt_times, "s": fmt_seconds, "big": fmt_big,
    "usd": fmt_usd, "text": fmt_text,
}
"""Named cell formats for :func:`table`."""

NUMERIC_FORMATS = set(FORMATS) - {"text"}


# --- building blocks -----------------------------------------------------------

@dataclass(frozen=True)
class Col:
    """One table column: the frame's column, its header (with unit) and format name."""

    name: str
    header: str
    fmt: str = "text"
    help: str = ""
    wrap: bool = False
    """Long text that may wrap over lines (other cells stay on one line)."""

    @property
    def css(self) -> str:
        return "num" if self.fmt in NUMERIC_FORMATS else ("txt wrap" if self.wrap else "txt")


def table(frame: pd.DataFrame, columns: Sequence[Col], *, caption: str = "",
          highlight: Sequence[bool] | None = None, note: str = "") -> Fragment:
    """An HTML table of ``frame``'s ``columns``, formatted and escaped.

    ``highlight`` marks rows to emphasise (e.g. the best configuration);
    ``caption`` and ``note`` are plain text shown above and below.
    """
    missing = [c.name for c in columns if c.name not in frame.columns]
    if missing:
        raise KeyError(f"table columns not in the frame: {', '.join(missing)}")
    head = "".join(f'<th class="{c.css}"' + (f' title="{esc(c.help)}"' if c.help else "") + f">{esc(c.header)}</th>"
                   for c in columns)
    rows = []
    marks = list(highlight) if highlight is not None else [False] * len(frame)
    for mark, (_, record) in zip(marks, frame.iterrows()):
        cells = "".join(f'<td class="{c.css}">{esc(FORMATS[c.fmt](record[c.name]))}</td>' for c in columns)
        rows.append(f'<tr class="best">{cells}</tr>' if mark else f"<tr>{cells}</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    foot = f'<p class="tp-note">{esc(note)}</p>' if note else ""
    text = frame[[c.name for c in columns]].to_string(index=False)
    return Fragment(f'<div class="tp-table-wrap"><table class="tp-table">{cap}<thead><tr>{head}</tr></thead>'
                    f'<tbody>{"".join(rows)}</tbody></table></div>{foot}', text)


def heading(text: str, level: int = 3) -> Fragment:
    """A section heading with an ``id`` (for the table of contents); ``text`` is escaped."""
    anchor = re.sub(r"[^\w-]+", "-", text.strip()).strip("-") or "section"
    return Fragment(f'<h{level} id="{esc(anchor)}">{esc(text)}</h{level}>', text)


def paragraph(template: str, **values: object) -> Fragment:
    """A paragraph: ``template`` is trusted HTML written in the library, with
    ``{name}`` placeholders filled by ``values`` escaped (numbers must be
    preformatted strings or are shown with ``str``)."""
    return Fragment(f"<p>{template.format(**{k: esc(v) for k, v in values.items()})}</p>")


def callout(template: str, kind: str = "info", **values: object) -> Fragment:
    """A highlighted box (``info``, ``warn`` or ``good``); placeholders as in :func:`paragraph`."""
    body = template.format(**{k: esc(v) for k, v in values.items()})
    return Fragment(f'<div class="tp-callout tp-{esc(kind)}">{body}</div>', _strip_tags(body))


def bullet_list(items: Sequence[str]) -> Fragment:
    """A bulleted list of plain-text items (escaped)."""
    if not items:
        return Fragment("")
    return Fragment("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>", "\n".join(items))


def headline(template: str, **values: object) -> Fragment:
    """The report's key finding, shown as a banner and recorded as its headline
    for the index page. Placeholders as in :func:`paragraph`."""
    body = template.format(**{k: f"<strong>{esc(v)}</strong>" for k, v in values.items()})
    text = _strip_tags(body)
    return Fragment(f'<div class="tp-headline">{body}</div>', text, {"headline": text})


def _strip_tags(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def _missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    try:
        return bool(math.isnan(value))  # type: ignore[arg-type]
    except TypeError:
        return False


def key_figures(items: Sequence[tuple[str, str]]) -> Fragment:
    """A row of key figures: ``(value, caption)`` pairs, both plain text."""
    cells = "".join(f'<div class="tp-fact"><b>{esc(v)}</b><span>{esc(c)}</span></div>' for v, c in items)
    return Fragment(f'<div class="tp-facts">{cells}</div>', "; ".join(f"{c}: {v}" for v, c in items))


@dataclass(frozen=True)
class Section:
    """Several outputs (fragments, charts) shown one after another when a
    notebook cell ends with it."""

    parts: Sequence[object]

    def _ipython_display_(self) -> None:
        from IPython.display import display

        for part in self.parts:
            display(part)
