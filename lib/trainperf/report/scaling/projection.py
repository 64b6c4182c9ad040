"""How the Karp–Flatt serial fraction moves, and Amdahl's law and the USL fitted and projected as far as their
95 % bands reach, beside the straight line (README.md, "Scaling"; docs/statistics.md, "Scaling fits")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.invariants import EMPTIED
from trainperf.report.html import and_list, fmt_int, fmt_sig, fmt_times
from trainperf.report.run_labels import by_experiment, doubtful
from trainperf.report.page import InputError
from trainperf.report.scaling.multipliers import changes, kind_of, left_out
from trainperf.scaling import NAMES as LAWS, ScalingFit, fit, parameter_text

TREND_STEP = 1.2  # factor by which the serial fraction must change to count as a change


def serial_trend(e: np.ndarray, low: np.ndarray | None = None, high: np.ndarray | None = None) -> str:
    """How the Karp–Flatt serial fraction ``e`` (in order of devices) moves, a key of :data:`MEANING`: a move
    counts at :data:`TREND_STEP` times (any difference for values ≤ 0) and, with the 95 % intervals
    ``low``–``high``, only where they do not overlap; ``is within the noise`` where only that holds it back."""
    e = np.asarray(e, dtype=float)
    low = e if low is None else np.where(np.isnan(low), e, low)
    high = e if high is None else np.where(np.isnan(high), e, high)
    steps = [_serial_move(e, low, high, i, i + 1) for i in range(len(e) - 1)]
    if 1 in steps and -1 in steps:
        return "moves both ways"
    if end := _serial_move(e, low, high, 0, len(e) - 1):
        return "grows" if end > 0 else "falls"
    untested = [_serial_move(e, e, e, i, j) for i, j in [*zip(range(len(e) - 1), range(1, len(e))), (0, len(e) - 1)]]
    return "is within the noise" if any(untested) else "stays about constant"


def _serial_move(e: np.ndarray, low: np.ndarray, high: np.ndarray, a: int, b: int) -> int:
    """+1 when ``e[b]`` rises beyond ``e[a]`` (see :func:`serial_trend`), −1 when it falls, else 0."""
    positive = e[a] > 0 and e[b] > 0
    if (e[b] > e[a] * TREND_STEP if positive else e[b] > e[a]) and low[b] > high[a]:
        return 1
    if (e[b] < e[a] / TREND_STEP if positive else e[b] < e[a]) and high[b] < low[a]:
        return -1
    return 0


MEANING = {"grows": "overhead grows with scale (communication, synchronisation) — Amdahl's law alone will be "
                    "optimistic",
           "falls": "the baseline carries a cost the larger runs amortise (or the work per device changes)",
           "stays about constant": "a fixed serial part limits scaling, as Amdahl's law assumes",
           "moves both ways": "no single serial part explains these runs; other changes between them (nodes, "
                              "strategy, noise) weigh more",
           "is within the noise": "its changes lie within the 95 % intervals of the measurements, so no trend can "
                                  "be read from them"}


def serial_notes(every_row: pd.DataFrame) -> list[str]:
    """How each experiment's serial fraction (its ``concluded`` :func:`~trainperf.report.scaling.multipliers.table`
    rows) moves (:func:`serial_trend`) and what that means; first, where e lies outside [0, 1] (emptied)."""
    out = [f"{name}: the Karp–Flatt fraction e is outside [0, 1] at "
           f"{and_list([fmt_int(g) + ' devices' for g in group.loc[group['serial_emptied'], 'gpus']])} "
           f"({EMPTIED}: below 0 the speedup is super-linear, above 1 more devices were slower than fewer: no serial "
           "share of the work explains either); not plotted."
           for name, group in every_row.groupby("experiment", sort=False) if group["serial_emptied"].any()]
    for name, every in every_row.dropna(subset=["serial_fraction"]).groupby("experiment", sort=False):
        group = every[every["concluded"]]
        left = left_out(every)
        e = group["serial_fraction"].to_numpy(float)
        if len(e) < 2:
            if len(group) < len(every):
                out.append(f"{name}: no trend of e is read: fewer than two of its values come from runs a "
                           f"conclusion may be drawn from.{left}")
            continue
        trend = serial_trend(e, group["serial_low"].to_numpy(float), group["serial_high"].to_numpy(float))
        caveat = " Two values only: a weak indication." if len(e) == 2 and trend not in (
            "moves both ways", "is within the noise") else ""
        if not group["serial_low"].notna().all() and trend != "stays about constant":
            caveat += " No intervals (runs measured once without steps): the noise is not tested."
        values = " → ".join(fmt_sig(v) if pd.isna(lo) else f"{fmt_sig(v)} (95 % interval {fmt_sig(lo)} to "
                            f"{fmt_sig(hi)})"
                            for v, lo, hi in zip(e, group["serial_low"], group["serial_high"]))
        out.append(f"{name}: e {trend} ({values} at "
                   f"{', '.join(f'{x:g}' for x in group['ideal'])}× the baseline devices) — "
                   f"{MEANING[trend]}.{caveat}{left}")
    return out


BAND_LEVEL = 0.95
MIN_FIT_POINTS = 3  # device counts before a law is fitted: a 2-parameter law through 2 points has no error


@dataclass
class Projection:
    """One experiment's fits and their projection to ``target`` relative devices."""

    experiment: str
    p: np.ndarray
    multiplier: np.ndarray
    fits: dict[str, ScalingFit]
    target: float
    base_gpus: float

    def naive(self, p: np.ndarray | float) -> np.ndarray:
        """The straight-line projection from the largest measured point: ``S(p_max) · p / p_max``."""
        last = int(np.argmax(self.p))
        return self.multiplier[last] * np.asarray(p, dtype=float) / self.p[last]

    @property
    def best(self) -> ScalingFit:
        """:func:`best_fit` of its fits."""
        return best_fit(self.fits.values())


def best_fit(fits: Iterable[ScalingFit]) -> ScalingFit:
    """The lowest-RMSE of ``fits`` with a known error (:attr:`~trainperf.scaling.ScalingFit.has_band`), else of all."""
    fits = list(fits)
    return min([f for f in fits if f.has_band] or fits, key=lambda f: f.rmse)


def projections(runs: pd.DataFrame, project_to_gpus: float | None = None) -> list[Projection]:
    """USL fits, and Amdahl's for strong scaling, of every experiment that changes only the device count at
    :data:`MIN_FIT_POINTS` device counts or more, projected to ``project_to_gpus`` (default: 8 × the largest)."""
    out = []
    for name, group in by_experiment(runs):
        if changes(group):
            continue
        doubt = doubtful(group)
        named = group.loc[group["run_id"] == group["baseline_run_id"], "gpus"]
        base_gpus = float(named.iloc[0]) if len(named) else float(group["gpus"].min())
        if doubt[group["gpus"] == base_gpus].any():  # every multiplier is measured against a doubtful baseline
            continue
        group = group[~doubt].dropna(subset=["scaling_multiplier"])
        p = group["gpus"].to_numpy(float) / base_gpus  # relative devices, the baseline's p = 1
        if len(np.unique(p)) < MIN_FIT_POINTS:
            continue
        target = (project_to_gpus / base_gpus) if project_to_gpus else 8 * float(p.max())
        if target <= p.max():
            raise InputError(f"project_to_gpus={project_to_gpus:g} is not beyond the largest measured "
                             f"scale of {name} ({group['gpus'].max():g} devices)")
        fitted = ("usl",) if kind_of(group) == "weak" else tuple(LAWS)  # Amdahl: fixed total work only
        multiplier = group["scaling_multiplier"].to_numpy(float)
        out.append(Projection(name, p, multiplier, {law: fit(p, multiplier, law) for law in fitted}, target, base_gpus))
    return out


MAX_BAND = 4.0
"""A projection whose 95 % band's high end is more than this many times its low end (or that has no band)
is out of the data's reach: it is neither drawn, tabulated nor headlined."""
BEYOND_REACH = "the data cannot project this far"


def within_reach(f: ScalingFit, relative: np.ndarray, measured_max: float) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """Where ``f`` projects (``relative`` devices, increasing): up to ``measured_max``, and beyond as far as its
    95 % band spans :data:`MAX_BAND` or less; and the band (low, high) at every point."""
    low, high = f.band(relative, BAND_LEVEL)
    narrow = high <= MAX_BAND * low  # False where there is no band (NaN)
    reach = (relative <= measured_max) | np.logical_and.accumulate(narrow | (relative <= measured_max))
    return reach, low, high


def curves(found: list[Projection], points: int = 60) -> pd.DataFrame:
    """The fitted laws (as far as :func:`within_reach`), the straight line and the ideal from 1 to the target:
    rows ``experiment, devices, relative, curve, multiplier, low, high, band`` (multipliers, ×; ``low``/``high``:
    the fit's 95 % band, NaN for the lines and a law without one; ``band``: ``95 % band``, or why there is none)."""
    rows = []
    for proj in found:
        x = np.geomspace(1, proj.target, points)
        lines = []
        for law, f in proj.fits.items():
            reach, low, high = within_reach(f, x, float(proj.p.max()))
            lines.append(pd.DataFrame({"curve": f"{LAWS[law]} fit", "relative": x, "multiplier": f.predict(x),
                                       "low": low, "high": high, "band": "95 % band" if f.has_band else f.why_no_band}
                                      )[reach])
        beyond = x[x >= proj.p.max()]
        lines.append(pd.DataFrame({"curve": "straight line (efficiency held at the last point)", "relative": beyond,
                                   "multiplier": proj.naive(beyond)}))
        lines.append(pd.DataFrame({"curve": "ideal", "relative": x, "multiplier": x}))
        rows += [frame.assign(experiment=proj.experiment, devices=frame["relative"] * proj.base_gpus)
                 for frame in lines]
    columns = ["experiment", "devices", "relative", "curve", "multiplier", "low", "high", "band"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


def projected(found: list[Projection]) -> pd.DataFrame:
    """Per experiment and projected device count (doublings up to the target): each law's multiplier (×; none
    beyond :func:`within_reach`) and its 95 % band as text (``{law}_band``: ``5.1×–6.3×``, or :data:`BEYOND_REACH`
    with the band or why there is none), the straight line (``naive``) and the ``ideal``."""
    parts = []
    for proj in found:
        doublings = float(proj.p.max()) * 2.0 ** np.arange(1, 64)
        p = np.array([*doublings[doublings < proj.target], proj.target])
        part = pd.DataFrame({"experiment": proj.experiment, "devices": p * proj.base_gpus})
        for law, f in proj.fits.items():
            reach, low, high = within_reach(f, p, float(proj.p.max()))  # one call per law: each draws anew
            band = [f"{fmt_times(a)}–{fmt_times(b)}" if ok else
                    f"{BEYOND_REACH}: {f'95 % band {fmt_times(a)}–{fmt_times(b)}' if f.has_band else f.why_no_band}"
                    for ok, a, b in zip(reach, low, high)]
            part = part.assign(**{law: np.where(reach, f.predict(p), np.nan), f"{law}_band": band})
        parts.append(part.assign(naive=proj.naive(p), ideal=p))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def fit_notes(found: list[Projection], drawn: pd.DataFrame | None = None) -> list[str]:
    """Per experiment and law its parameters with standard errors and RMSE (×), or why it has no band; where the
    USL peaks within 4 × the target; where a law stops short of it (:func:`curves` ``drawn``); else why nothing
    is fitted."""
    drawn = curves(found) if drawn is None else drawn
    if not found:
        return [f"No experiment that changes only the device count has {MIN_FIT_POINTS} or more device counts: no "
                "law is fitted, and nothing is projected."]
    out = [f"{proj.experiment} — {LAWS[law]}: "
           + ", ".join(f"{name} = {parameter_text(value, f.stderr[name])}" for name, value in f.params.items())
           + f"; RMSE {fmt_sig(f.rmse)}× over {len(f.devices)} points"
           + ("" if f.has_band else f"; {f.why_no_band}, no standard errors")
           for proj in found for law, f in proj.fits.items()]
    out += [f"The USL fit of {proj.experiment} peaks at about {fmt_int(peak * proj.base_gpus)} devices: beyond "
            "that, adding devices makes it slower." for proj in found if (peak := proj.fits["usl"].peak) < proj.target * 4]
    for proj in found:
        for law, f in proj.fits.items():
            reach = drawn.loc[(drawn["experiment"] == proj.experiment) & (drawn["curve"] == f"{LAWS[law]} fit"),
                              "relative"].max()
            if reach < proj.target:
                why = "its 95 % band spans more than 4×" if f.has_band else "its error is not known"
                out.append(f"{proj.experiment} — {LAWS[law]}: beyond {fmt_int(reach * proj.base_gpus)} devices "
                           f"{why}: {BEYOND_REACH}, so it is not drawn or tabulated there.")
    return out

