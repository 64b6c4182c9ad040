"""Fitted projections: Amdahl's law and the Universal Scalability Law fitted to each study that changes only
the device count, projected beyond the measured scale as far as their 95 % bands reach, next to the straight
line a naive projection draws through the last point."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainperf.report.configs import by_experiment, doubtful
from trainperf.report.html import fmt_int, fmt_sig, fmt_times
from trainperf.report.page import InputError
from trainperf.report.scaling.studies import changes, kind_of
from trainperf.scaling import NAMES as LAWS, ScalingFit, fit, parameter_text

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
        """The straight-line projection from the largest measured point:
        ``S(p_max) · p / p_max`` (as in a report that multiplies one node's
        throughput by the number of nodes)."""
        last = int(np.argmax(self.p))
        return self.multiplier[last] * np.asarray(p, dtype=float) / self.p[last]

    @property
    def best(self) -> ScalingFit:
        """The law that fits the measured multipliers best (lowest RMSE) among
        those whose error is known (:attr:`~trainperf.scaling.ScalingFit.has_band`); among all when none is."""
        known = [f for f in self.fits.values() if f.has_band]
        return min(known or self.fits.values(), key=lambda f: f.rmse)

    def targets(self) -> list[float]:
        """Relative device counts to tabulate: doublings from the largest measured up to the target."""
        points = float(self.p.max()) * 2.0 ** np.arange(1, 64)
        return [*points[points < self.target].tolist(), self.target]


def project(name: str, p: np.ndarray, multiplier: np.ndarray, target: float, base_gpus: float,
            fitted: tuple[str, ...] = tuple(LAWS)) -> Projection:
    """Fit the laws ``fitted`` (default Amdahl and USL) to one series (``p``:
    relative devices, the baseline's ``p = 1``; ``base_gpus``: its devices) and
    keep them for projection to ``target``."""
    fits = {law: fit(p, multiplier, law) for law in fitted}
    return Projection(name, np.asarray(p, float), np.asarray(multiplier, float), fits, float(target), base_gpus)


def projections(runs: pd.DataFrame, project_to_gpus: float | None = None) -> list[Projection]:
    """USL fits, and Amdahl's for strong scaling (:func:`trainperf.report.scaling.studies.laws`), for every
    experiment that changes only the device count and has
    :data:`MIN_FIT_POINTS` device counts or more, projected to ``project_to_gpus`` devices
    (default: 8 × the largest measured)."""
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
        out.append(project(name, p, group["scaling_multiplier"].to_numpy(float), target, base_gpus, fitted))
    return out


MAX_BAND = 4.0
"""A projection whose 95 % band's high end is more than this many times its low end (or that has no band)
is out of the data's reach: it is neither drawn, tabulated nor headlined."""
BEYOND_REACH = "the data cannot project this far"


def within_reach(f: ScalingFit, relative: np.ndarray, measured_max: float) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """Where the fit ``f`` projects (relative devices ``relative``, in increasing order): within the
    measured scale (``measured_max``), and beyond it as far as its 95 % band spans :data:`MAX_BAND` or
    less; and the band (low, high) at every point."""
    low, high = f.band(relative, BAND_LEVEL)
    narrow = high <= MAX_BAND * low  # False where there is no band (NaN)
    reach = (relative <= measured_max) | np.logical_and.accumulate(narrow | (relative <= measured_max))
    return reach, low, high


def curves(found: list[Projection], points: int = 60) -> pd.DataFrame:
    """The fitted laws, the straight line and the ideal from 1 to the target:
    rows ``experiment, devices, relative, curve, multiplier, low, high, band``
    (``low``/``high``: the fit's 95 % band, NaN for the lines and for a law
    without a band; ``band``: ``95 % band``, or why there is none). A law is
    drawn only as far as it projects (:func:`within_reach`): beyond the measured
    scale, while its band spans :data:`MAX_BAND` or less."""
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
    """Per experiment and projected device count (doublings up to the
    target): each law's multiplier and its 95 % band as text (``{law}_band``:
    ``5.1×–6.3×``; where the band spans more than :data:`MAX_BAND` or there is
    none, no multiplier and :data:`BEYOND_REACH` with the band or why there is
    none), the straight line and the ideal."""
    parts = []
    for proj in found:
        p = np.array(proj.targets())
        part = pd.DataFrame({"experiment": proj.experiment, "devices": p * proj.base_gpus})
        for law, f in proj.fits.items():
            reach, low, high = within_reach(f, p, float(proj.p.max()))  # one call per law: each draws anew
            band = [f"{fmt_times(a)}–{fmt_times(b)}" if ok else
                    f"{BEYOND_REACH}: {f'95 % band {fmt_times(a)}–{fmt_times(b)}' if f.has_band else f.why_no_band}"
                    for ok, a, b in zip(reach, low, high)]
            part = part.assign(**{law: np.where(reach, f.predict(p), np.nan), f"{law}_band": band})
        parts.append(part.assign(naive=proj.naive(p), ideal=p))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def fit_parameters(found: list[Projection]) -> pd.DataFrame:
    """Per experiment, law and parameter: the fitted value, its standard
    error, the text to show, the law's RMSE (×) over the measured points and
    ``band``: why the law has no band (empty when it has one)."""
    rows = [{"experiment": proj.experiment, "law": LAWS[law], "parameter": name, "value": value,
             "stderr": f.stderr[name], "shown": parameter_text(value, f.stderr[name]), "rmse": f.rmse,
             "points": len(f.devices), "band": "" if f.has_band else f.why_no_band}
            for proj in found for law, f in proj.fits.items() for name, value in f.params.items()]
    return pd.DataFrame(rows)


def fit_notes(found: list[Projection]) -> list[str]:
    """One line per experiment and law (parameters and RMSE), and a warning where the USL fit peaks
    within 4 × the projection's target; a sentence saying why nothing is fitted when ``found`` is empty."""
    if not found:
        return [f"No experiment that changes only the device count has {MIN_FIT_POINTS} or more device counts: no "
                "law is fitted, and nothing is projected."]
    params = fit_parameters(found)
    out = [f"{name} — {law}: {', '.join(f'{p} = {s}' for p, s in zip(g['parameter'], g['shown']))}; RMSE "
           f"{fmt_sig(g['rmse'].iloc[0])}× over {g['points'].iloc[0]} points"
           + ("" if g["band"].iloc[0] == "" else f"; {g['band'].iloc[0]}, no standard errors")
           for (name, law), g in params.groupby(["experiment", "law"], sort=False)]
    out += [f"The USL fit of {proj.experiment} peaks at about {fmt_int(peak * proj.base_gpus)} devices: beyond "
            "that, adding devices makes it slower." for proj in found if (peak := proj.fits["usl"].peak) < proj.target * 4]
    for proj in found:
        x = np.geomspace(1, proj.target, 60)
        for law, f in proj.fits.items():
            reach = x[within_reach(f, x, float(proj.p.max()))[0]].max()
            if reach < proj.target:
                why = "its 95 % band spans more than 4×" if f.has_band else "its error is not known"
                out.append(f"{proj.experiment} — {LAWS[law]}: beyond {fmt_int(reach * proj.base_gpus)} devices "
                           f"{why}: {BEYOND_REACH}, so it is not drawn or tabulated there.")
    return out

