"""The front end of text logs: a cleaned line (``text.clean``) into its fields (:func:`fields_of`: the launcher's
rank prefix and a collector's timestamp taken off, then a JSON object or ``key: value`` tokens) and a printed
value into a number and its unit (:func:`value`). The shapes and units read are listed in docs/importers.md,
"The vocabulary"; keys are normalised (:func:`normal`), values kept as printed.
"""

from __future__ import annotations

import functools
import json
import re

from trainperf.importers.text import LEADING_TIME, NUMBER, current, number, rank_prefix

VALUE = rf"(?:{NUMBER})(?:\s*/\s*(?:{NUMBER}))?(?:\s?(?:ms|sec|s|min|m|h|%|[KMBGT]i?B?)\b|%)?"
"""A value as printed: a number, a ``current/average`` pair or ``N/M``, a unit or a multiplier."""
_PAIR = re.compile(rf"(?:^|(?<=[\s|,\[{{(]))(?P<key>[A-Za-z_][\w./()%\- ]{{0,63}}?)\s*(?:[:=]\s*|\s+)"
                   rf"(?P<value>{VALUE})(?=$|[\s|,\])}}])")
"""``key: value``, ``key=value``, ``key value``: a key (at most 64 characters, so a line costs linear time)
starts at a separator, its value ends at one."""
_PROGRESS = re.compile(r"(?:^|\s)(\d+)\s*/\s*\d+(?=\s|$)")
_ENVELOPE = re.compile(rf"^(?:{LEADING_TIME}|\s*[IWEF]\d{{4}} \d\d:\d\d:\d\d\.\d+\s+\d+\s+[\w.]+:\d+\])")
"""A collector's or logger's timestamp (ISO, or absl's ``I0804 08:14:00.123 140 file.py:196]``) before the record."""
_SEPARATOR = re.compile(r"[\s_\-.]+")
_UNIT_IN_KEY = re.compile(r"\((ms|s|sec|min|h|%|gb|gib|mb|mib)\)|\bin (ms|s|sec|min|h)\b|[ _](ms|s|sec|min|h|gb|"
                          r"mib|mb)$|/s/(?:gpu|device)\b|per (?:gpu|device)\b")
_SUFFIX = re.compile(r"([KMBGT])(i?B)?$|(ms|sec|s|min|m|h|%)$")
_COMMON_UNITS = ("ms", "%", "s")
SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
"""Multipliers of a count printed with a suffix (``1.2K``, ``3M``, ``2B`` tokens)."""
SECONDS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
"""Seconds per printed time unit."""
MAX_LINE_CHARS = 1 << 16
"""A line longer than this (no log prints records so long) has no fields, nor a JSON object so long."""


def normal(key: str) -> str:
    """A key as the vocabulary holds it: lower case, ``_ - .`` and runs of spaces as one space."""
    return _SEPARATOR.sub(" ", key.strip().lower()).strip()


def fields_of(line: str) -> tuple[int | None, dict[str, str]]:
    """The rank the launcher prefix names (None: none) and the fields of ``line``, normalised key -> printed
    value (the first of a key wins); a JSON object's strings and numbers as text, ``[a, b]`` as ``key 0``,
    ``key 1``."""
    rank, body = rank_prefix(line)
    if len(body) > MAX_LINE_CHARS:
        return rank, {}
    envelope = _ENVELOPE.match(body)
    if envelope is not None:
        body = body[envelope.end():]
    brace = body.find("{")
    if brace >= 0 and len(body) <= MAX_LINE_CHARS and '":' in body:
        try:
            found, _ = json.JSONDecoder().raw_decode(body, brace)
        except (ValueError, RecursionError):  # not JSON, or nested beyond Python's stack
            found = None
        if isinstance(found, dict):
            out: dict[str, str] = {}
            _flatten(found, "", out)
            return rank, out
    out = {}
    for match in _PAIR.finditer(body):
        out.setdefault(normal(match.group("key")), match.group("value"))
    progress = _PROGRESS.search(body)
    if progress is not None and "/" not in "".join(out.values()):
        out.setdefault("progress", progress.group(1))
    return rank, out


def _flatten(found: object, key: str, out: dict[str, str]) -> None:
    if isinstance(found, dict):
        for name, item in found.items():
            _flatten(item, f"{key}.{name}" if key else str(name), out)
    elif isinstance(found, list) and len(found) <= 8:
        for k, item in enumerate(found):
            _flatten(item, f"{key} {k}", out)
    elif isinstance(found, (int, float, str)) and not isinstance(found, bool):
        out.setdefault(normal(key), str(found))


@functools.lru_cache(maxsize=4096)
def unit_of_key(key: str) -> str:
    """The unit a normalised key prints its value in (``elapsed time per iteration (ms)`` -> ``ms``,
    ``train step timing in s`` -> ``s``, ``tokens/s/gpu`` and ``per gpu`` -> ``per device``); '' if none."""
    match = _UNIT_IN_KEY.search(key.lower())
    if match is None:
        return ""
    unit = next((g for g in match.groups() if g), "")
    return unit or "per device"


def value(text: str, key: str = "") -> tuple[float, str]:
    """The number printed as ``text`` and its unit ('' if none): ``1,234.5`` -> (1234.5, ''), ``12.3ms`` ->
    (12.3, 'ms'), ``45%`` -> (45.0, '%'), ``1.2K`` -> (1200.0, ''), ``13100.0/13240.9`` -> (13100.0, '')
    (a current/average pair: the current; a step ``N/M``: N of M); without a unit in the text, the unit
    of ``key`` (:func:`unit_of_key`). :class:`~trainperf.importers.text.LineError` if it is no number."""
    text = text.strip()
    try:
        return float(text), unit_of_key(key)
    except ValueError:
        pass
    for unit in _COMMON_UNITS:
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]), unit
            except ValueError:
                break
    unit = ""
    suffix = _SUFFIX.search(text)
    scale = 1.0
    if suffix is not None:
        if suffix.group(1):
            if suffix.group(2):  # a size in bytes: GB, GiB, MB
                unit = suffix.group(0).lower()
            else:
                scale = SCALE[suffix.group(1)]
        else:
            unit = suffix.group(3)
        text = text[:suffix.start()].rstrip()
    return number(current(text)) * scale, unit or unit_of_key(key)
