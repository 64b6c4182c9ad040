"""Short pieces of text a report shows around its tables and charts, every string from data escaped, with facts
for the index page (title, headline, inputs) in their display metadata; the ``fmt_*`` number formats, intervals as
text, paths as shown, and the errors a page shows as one line. The build imports it: no matplotlib nor SciPy."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from trainperf.errors import DataError
from trainperf.table_rules import is_missing

FACTS_KEY = "trainperf"  # the display-metadata key of a piece's facts

PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""The checkout the package is installed from (editable install): paths below it are shown relative."""


class _OneLine(DataError):
    """An error Jupyter shows as one line (``InputError: …``, ``NotApplicable: …``), not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class InputError(_OneLine):
    """A report parameter or input that cannot be used."""


class NotApplicable(_OneLine):
    """The selected data cannot answer this report (not an error in the data); the message names what is
    missing and what would supply it. The build writes a short page with it, marked "not applicable"."""


def shown_path(path: str | Path) -> str:
    """``path`` relative to the project root when it lies below it, else absolute."""
    resolved = Path(path).resolve()
    return resolved.relative_to(PROJECT_ROOT).as_posix() if resolved.is_relative_to(PROJECT_ROOT) else str(resolved)


def esc(value: object) -> str:
    """``value`` as text safe inside HTML elements and quoted attributes."""
    return html.escape("" if is_missing(value) else str(value), quote=True)


@dataclass(frozen=True)
class Html:
    """Escaped HTML that Jupyter displays, with plain text and optional facts for the pipeline."""

    html: str
    text: str
    facts: Mapping[str, object] = field(default_factory=dict)

    def _repr_mimebundle_(self, include=None, exclude=None):  # noqa: ANN001 (IPython protocol)
        data = {"text/html": self.html, "text/plain": self.text}
        return (data, {FACTS_KEY: dict(self.facts)}) if self.facts else data


def title(text: str, subtitle: str, facts: Mapping[str, object]) -> Html:
    """The page's ``h1`` and a paragraph per line of ``subtitle``; records ``facts`` (title, inputs) for the index."""
    lines = "".join(f'<p class="tp-subtitle">{esc(line)}</p>' for line in subtitle.splitlines())
    return Html(f"<h1>{esc(text)}</h1>{lines}", f"{text}\n{subtitle}", dict(facts))


def headline(text: str, figures: Sequence[tuple[str, str]] = ()) -> Html:
    """The report's key finding as a banner, ``(value, caption)`` key figures under it; the index's headline."""
    cells = "".join(f'<div class="tp-fact"><b>{esc(v)}</b><span>{esc(c)}</span></div>' for v, c in figures)
    facts = f'<div class="tp-facts">{cells}</div>' if figures else ""
    return Html(f'<div class="tp-headline">{esc(text)}</div>{facts}', text, {"headline": text})


def callout(text: str, kind: str = "info") -> Html:
    """A highlighted box (``info``, ``warn`` or ``good``) holding ``text``; nothing for empty text."""
    return Html(f'<div class="tp-callout tp-{esc(kind)}">{esc(text)}</div>', text) if text else Html("", "")


def paragraph(text: str) -> Html:
    """A paragraph of plain text."""
    return Html(f"<p>{esc(text)}</p>", text)


def bullets(items: Sequence[str]) -> Html:
    """A bulleted list of plain-text items; nothing for none."""
    return Html("<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>" if items else "", "\n".join(items))


def count(n: object, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 report``, ``2 reports``, ``1,024 processes``."""
    n = int(n)  # type: ignore[call-overload]
    return f"{n:,} {noun}{'' if n == 1 else 'es' if noun.endswith('s') else 's'}"


def first_of(names: Sequence[str], most: int, *, total: bool = False) -> str:
    """The first ``most`` of ``names`` joined with commas, then ``…`` (``… (12 in all)`` with ``total``)."""
    more = f", … ({len(names)} in all)" if total else ", …"
    return ", ".join(names[:most]) + ("" if len(names) <= most else more)


def and_list(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def around(found: pd.DataFrame, rate: object) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """The intervals of ``found`` (:func:`trainperf.estimates.run_intervals` rows) around the rates shown,
    ``rate`` (their relative width kept): low, high, and as text (``1,258–1,465``; ``None``: no interval)."""
    k = np.asarray(rate, float) / found["throughput"].to_numpy(float)
    low, high = found["low"].to_numpy(float) * k, found["high"].to_numpy(float) * k
    return low, high, [None if pd.isna(x) else f"{fmt_int(a)}–{fmt_int(b)}"
                       for x, a, b in zip(found["low"], low, high)]


def fmt_int(x: object) -> str:
    """Rounded to a whole number with thousands separators: ``122,599``."""
    return fmt_num(x, 0)


def fmt_num(x: object, digits: int = 2) -> str:
    """Fixed decimals with thousands separators: ``1,102.52``."""
    return "–" if is_missing(x) else f"{float(x):,.{digits}f}"


def fmt_sig(x: object, digits: int = 3) -> str:
    """``digits`` significant figures, thousands separators above 1000: ``0.0314``, ``4,010``."""
    if is_missing(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def fmt_pct(x: object, digits: int = 1, *, signed: bool = False) -> str:
    """A fraction as percent: ``0.383`` → ``38.3 %`` (``+38.3 %`` when ``signed``; never ``-0.0 %``)."""
    if is_missing(x):
        return "–"
    percent = 100 * float(x)
    return f"{0:.{digits}f} %" if round(percent, digits) == 0 else f"{percent:{'+' if signed else ''}.{digits}f} %"


def fmt_times(x: object, digits: int = 2) -> str:
    """A ratio: ``3.597`` → ``3.60×``."""
    return "–" if is_missing(x) else f"{float(x):,.{digits}f}×"


def fmt_seconds(x: object) -> str:
    """Seconds, 2 decimals below 10 000 s, with minutes or hours in brackets from 2 min on."""
    if is_missing(x):
        return "–"
    x = float(x)
    text = f"{x:,.2f} s" if x < 10_000 else f"{x:,.0f} s"
    return f"{text} ({x / 3600:,.1f} h)" if x >= 7200 else f"{text} ({x / 60:,.1f} min)" if x >= 120 else text


def fmt_big(x: object) -> str:
    """Large counts in words: ``7.6e9`` → ``7.60 billion``."""
    return _in_units(x, ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")), ",.2f")


def fmt_short(x: object) -> str:
    """Large counts, short: ``7.6e9`` → ``7.6 B``, ``1.2e12`` → ``1.2 T``, ``5e5`` → ``500 k``."""
    return _in_units(x, ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")), ",.3g")


def _in_units(x: object, units: Sequence[tuple[float, str]], spec: str) -> str:
    """``x`` in the largest of ``units`` it reaches, formatted with ``spec``; a whole number below."""
    for size, word in units:
        if not is_missing(x) and abs(float(x)) >= size:
            return f"{float(x) / size:{spec}} {word}"
    return fmt_int(x)


def fmt_usd(x: object) -> str:
    """US dollars: ``$2,160.00``."""
    return "–" if is_missing(x) else f"${float(x):,.2f}"
