"""Scaling across devices: multiplier, efficiency, serial fraction, fitted laws.

Within one scaling series (the runs of an experiment that differ only in the
device count: :func:`scaling_series`), the baseline is the mean of the runs
with the fewest devices, unless a row names its ``baseline_run_id``. With ``p``
the relative device count ``gpus / baseline gpus`` and ``X`` throughput:

* scaling multiplier ``S = X / X_baseline``
* scaling efficiency ``E = S / p``
* Karp–Flatt serial fraction ``e = (1/S − 1/p) / (1 − 1/p)`` for ``p > 1``
  (Karp & Flatt 1990, "Measuring parallel processor performance"); constant
  ``e`` means Amdahl-like serial work, ``e`` growing with ``p`` means
  overhead growing with scale (communication).
* cost efficiency: baseline cost per unit of work / this run's,
  ``E · price_baseline / price`` (equal to ``E`` at one price).

The speed compared is tokens/s, else samples/s (the one more runs have;
tokens/s on a tie). When no run of an experiment has a throughput (only
elapsed times, as in a strong-scaling study that reports epoch times), the
runs are taken to do equal work and ``S = elapsed_baseline / elapsed``; the
row's ``scaling_basis`` says which was used. A run that lacks the speed its
experiment is compared by gets no scaling (never a mix of bases), and
neither does an experiment whose baseline has no positive speed; the row's
notes say why.

Projections beyond the measured scale come from a fitted law, with its error:

* Amdahl: ``S(p) = 1 / (s + (1 − s) / p)``, serial fraction ``s`` in [0, 1];
* Universal Scalability Law (Gunther 1993):
  ``S(p) = p / (1 + σ(p − 1) + κ p (p − 1))``, contention ``σ ≥ 0``,
  coherency ``κ ≥ 0``; ``κ > 0`` gives a peak at ``p* = sqrt((1 − σ)/κ)``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from trainperf.stats import t_quantile


def amdahl(p: np.ndarray, s: float) -> np.ndarray:
    """Amdahl's law: multiplier at relative device count ``p`` with serial fraction ``s``."""
    p = np.asarray(p, dtype=float)
    return 1.0 / (s + (1.0 - s) / p)


def usl(p: np.ndarray, sigma: float, kappa: float) -> np.ndarray:
    """Universal Scalability Law: multiplier at ``p`` with contention ``sigma`` and coherency ``kappa``."""
    p = np.asarray(p, dtype=float)
    return p / (1.0 + sigma * (p - 1.0) + kappa * p * (p - 1.0))


LAWS = {
    "amdahl": (amdahl, ("s",), ([0.0], [1.0]), [0.05]),
    "usl": (usl, ("sigma", "kappa"), ([0.0, 0.0], [1.0, 1.0]), [0.01, 1e-4]),
}
"""name -> (multiplier function, its parameter names, bounds, initial guess).
The fitted model is ``X(N) = gamma · law(N)``: ``gamma`` (throughput of one
device, the units of the data) is fitted too, bounded below by 0."""
NAMES = {"amdahl": "Amdahl", "usl": "USL"}
"""The laws as people write them."""
AT_BOUND = 1e-9
"""A fitted parameter closer than this to 0 sits at its lower bound."""


@dataclass
class ScalingFit:
    """A scaling law fitted by least squares on throughput, ``X(N) = γ · S(N)``.

    As the R package ``usl`` (v3, Moeding & Gunther) does, the single-device
    throughput ``gamma`` (γ) is a fitted parameter, so the fit does not inherit
    the noise of one baseline measurement. ``devices`` are in the units the
    fit was given (device counts, or counts relative to a baseline: then γ is
    the baseline's fitted throughput); ``throughput`` in any unit (tokens/s,
    or multipliers: then γ ≈ 1). ``params``: the law's parameters then
    ``gamma``; ``stderr``: their standard errors (NaN when there are no more
    points than parameters); ``intervals``: 95 % intervals
    ``estimate ± t(0.975, n − k) · stderr`` clipped to the parameter's bounds
    (``usl``'s ``confint`` prints ``± t(0.95, n − 1) · stderr``, a narrower
    interval). ``rmse``: root-mean-square error of the fitted throughput
    (units of ``throughput``); ``relative_rmse``: of the residuals as a
    fraction of the measured throughput.
    """

    law: str
    params: dict[str, float]
    stderr: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    rmse: float
    relative_rmse: float
    devices: np.ndarray
    throughput: np.ndarray
    covariance: np.ndarray = field(repr=False)

    def predict(self, devices: np.ndarray | float) -> np.ndarray:
        """Fitted throughput ``γ · S(N)`` at device count(s) ``devices`` (units of the data)."""
        return self._curve(np.asarray(devices, dtype=float), list(self.params.values()))

    def multiplier(self, devices: np.ndarray | float) -> np.ndarray:
        """Fitted multiplier ``S(N) = X(N) / γ``: throughput relative to one device (``N = 1``)."""
        fn = LAWS[self.law][0]
        return fn(np.asarray(devices, dtype=float), *list(self.params.values())[:-1])

    def _curve(self, devices: np.ndarray, theta: list[float] | np.ndarray) -> np.ndarray:
        """``γ · S(devices)`` for the parameters ``theta`` (the law's, then γ): numbers,
        or arrays that broadcast against ``devices``."""
        fn = LAWS[self.law][0]
        return theta[-1] * fn(devices, *theta[:-1])

    @property
    def name(self) -> str:
        """The law as people write it: ``Amdahl``, ``USL``."""
        return NAMES[self.law]

    @property
    def has_band(self) -> bool:
        """Whether the fit's error is known: it had more device counts than parameters
        (else its standard errors and :meth:`band` are NaN; repeats at the same
        device counts do not count)."""
        return bool(np.all(np.isfinite(self.covariance)))

    @property
    def why_no_band(self) -> str:
        """Why the fit has no band: ``no band (3 device counts, 3 parameters: measure a 4th device count)``."""
        counts, params = len(np.unique(self.devices)), len(self.params)
        return (f"no band ({counts} device counts, {params} parameters: measure {_ordinal(params + 1)} device count"
                + ("" if counts == params else " and more") + ")")

    @property
    def peak(self) -> float:
        """Where the fitted multiplier peaks (units of ``devices``): the USL's
        ``sqrt((1 − σ) / κ)``; ``inf`` where it keeps rising (Amdahl, κ at its
        bound, σ ≥ 1)."""
        if self.law != "usl" or not self.params["kappa"] > AT_BOUND or not self.params["sigma"] < 1:
            return math.inf
        return math.sqrt((1 - self.params["sigma"]) / self.params["kappa"])

    def band(self, devices: np.ndarray | float, level: float = 0.95,
             draws: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bound of the fitted throughput at ``devices``.

        Propagates the parameters' covariance by sampling (``draws`` parameter
        sets from the fit's normal approximation, clipped to the law's bounds),
        takes the central ``level`` of the resulting spread and widens it by
        the fit's relative RMSE (throughput is never below 0). NaN where the
        covariance is unknown. Where a parameter sits at its bound (USL
        ``kappa = 0``: no retrograde term in the data), its draws can only move
        one way, so the band is one-sided: the estimate is near its upper edge,
        and the lower edge shows how much retrograde scaling the few points
        cannot rule out.
        """
        p = np.atleast_1d(np.asarray(devices, dtype=float))
        if not np.all(np.isfinite(self.covariance)):
            nan = np.full(p.shape, np.nan)
            return nan, nan.copy()
        lo, hi = _bounds(self.law)
        rng = np.random.default_rng(seed)
        theta = rng.multivariate_normal(list(self.params.values()), self.covariance, size=draws)
        theta = np.clip(theta, lo, hi)
        curves = self._curve(p, theta.T[..., np.newaxis])  # (draws, points): every draw at once
        tail = (1.0 - level) / 2.0
        low, high = np.quantile(curves, [tail, 1.0 - tail], axis=0)
        return low * max(0.0, 1.0 - self.relative_rmse), high * (1.0 + self.relative_rmse)

    def table(self) -> pd.DataFrame:
        """One row per parameter: ``parameter``, ``estimate``, ``stderr``, ``low``, ``high`` (95 %)."""
        return pd.DataFrame([{"parameter": name, "estimate": value, "stderr": self.stderr[name],
                              "low": self.intervals[name][0], "high": self.intervals[name][1]}
                             for name, value in self.params.items()])

    def describe(self) -> str:
        """One line: the law, its parameters with standard errors, and the RMSE."""
        parts = ", ".join(f"{name} = {parameter_text(value, self.stderr[name])}" for name, value in self.params.items())
        return f"{self.name}: {parts}; RMSE {self.rmse:.3g} over {len(self.devices)} points"


def parameter_text(value: float, stderr: float) -> str:
    """A fitted parameter for people: ``0.0312 ± 0.004``, or ``0 (at its
    bound)`` where the fit pushed it to 0 (its standard error then means nothing)."""
    if abs(value) < AT_BOUND:
        return "0 (at its bound)"
    return f"{value:.4g}" + ("" if math.isnan(stderr) else f" ± {stderr:.2g}")


def _ordinal(n: int) -> str:
    """``a 4th``, ``a 3rd``, ``an 11th``."""
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return ("an " if n in (8, 11, 18) or str(n).startswith("8") else "a ") + f"{n}{suffix}"


def _bounds(law: str) -> tuple[list[float], list[float]]:
    """Lower and upper bounds of the law's parameters followed by ``gamma``'s."""
    lo, hi = LAWS[law][2]
    return [*lo, 0.0], [*hi, np.inf]


def fit(devices: np.ndarray, throughput: np.ndarray, law: str = "usl") -> ScalingFit:
    """Fit ``X(N) = γ · S(N)`` (``S``: ``amdahl`` or ``usl``) by least squares
    on the throughput ``X`` measured at device counts ``devices`` (absolute, or
    relative to a baseline), estimating ``γ`` with the law's parameters.

    The start values are ``usl``'s: ``γ = max(X / N)``, ``σ = 0.01``,
    ``κ = 10⁻⁴`` (Amdahl ``s = 0.05``). Raises ``ValueError`` with fewer
    than two distinct device counts.
    """
    if law not in LAWS:
        raise ValueError(f"unknown scaling law {law!r}; known: {', '.join(LAWS)}")
    p = np.asarray(devices, dtype=float)
    x = np.asarray(throughput, dtype=float)
    keep = np.isfinite(p) & np.isfinite(x)
    p, x = p[keep], x[keep]
    if len(np.unique(p)) < 2:
        raise ValueError("a scaling fit needs measurements at two or more device counts")
    fn, law_names, _, guess = LAWS[law]
    names = (*law_names, "gamma")

    def model(n, *theta):
        return theta[-1] * fn(n, *theta[:-1])

    from scipy.optimize import OptimizeWarning, curve_fit  # imported here: a second to load, fits only

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)  # no covariance: handled below
        params, cov = curve_fit(model, p, x, p0=[*guess, float(np.max(x / p))], bounds=_bounds(law),
                                x_scale="jac", maxfev=20000)
    dof = len(p) - len(names)
    if len(np.unique(p)) <= len(names):  # repeats measure noise, not whether the law's shape fits: no band
        cov = np.full((len(names), len(names)), np.nan)
    stderr = {n: float(math.sqrt(v)) if v >= 0 else math.nan for n, v in zip(names, np.diag(cov))}
    t = t_quantile(dof)
    lo, hi = _bounds(law)
    intervals = {n: (max(lo[i], float(params[i]) - t * stderr[n]), min(hi[i], float(params[i]) + t * stderr[n]))
                 for i, n in enumerate(names)}
    residuals = x - model(p, *params)
    return ScalingFit(
        law=law,
        params=dict(zip(names, map(float, params))),
        stderr=stderr,
        intervals=intervals,
        rmse=float(np.sqrt(np.mean(residuals ** 2))),
        relative_rmse=float(np.sqrt(np.mean((residuals / x) ** 2))),
        devices=p,
        throughput=x,
        covariance=cov,
    )


def karp_flatt(multiplier: np.ndarray, devices: np.ndarray) -> np.ndarray:
    """Karp–Flatt serial fraction ``(1/S − 1/p) / (1 − 1/p)``; NaN where ``p <= 1``."""
    s = np.asarray(multiplier, dtype=float)
    p = np.asarray(devices, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / s - 1.0 / p) / (1.0 - 1.0 / p)
    return np.where(p > 1, e, np.nan)


SERIES_SETTINGS = {"platform": "platform", "model": "model", "n_params": "parameters", "precision": "precision",
                   "strategy": "strategy", "tensor_parallel": "tensor parallel",
                   "pipeline_parallel": "pipeline parallel", "context_parallel": "context parallel",
                   "seq_len": "sequence length",
                   "activation_checkpointing": "activation checkpointing", "compiled": "compiled",
                   "extra_configuration": "configuration"}
"""Settings (column: words) that split an experiment into scaling series where runs
on one device count differ in them; so does the batch per device."""

SCALING_TYPES = ("strong", "weak")
"""``scaling_type``: strong scaling keeps the total work of an optimizer step (the
global batch) as devices are added; weak scaling keeps the work per device."""

SCALING_INPUTS = ("run_id", "experiment", "gpus", "baseline_run_id", "tokens_per_s", "samples_per_s", "elapsed_s",
                  "step_time_s", "tokens", "samples", "price_per_gpu_hour", "micro_batch_size", "grad_accum_steps",
                  "global_batch_size", "data_parallel", "scaling_type", *SERIES_SETTINGS)
"""The columns :func:`add_scaling` reads from a run."""


def add_scaling(runs: pd.DataFrame, notes: list[list[str]]) -> pd.DataFrame:
    """Add ``scaling_study``, ``scaling_type`` (where not given), ``baseline_run_id``,
    ``scaling_basis``, ``scaling_multiplier``, ``scaling_efficiency``,
    ``serial_fraction`` (strong scaling only) and ``cost_efficiency`` per
    scaling series (:func:`scaling_series`). ``runs``
    needs ``run_id``, ``experiment``, ``gpus`` and the derived throughput
    columns; the returned frame is a new one. Why a row's scaling stays empty
    is appended to ``notes[position]``.
    """
    out = runs.copy()
    cols = {c: np.full(len(out), np.nan, dtype=object if c in TEXT else float)
            for c in ("scaling_type", "baseline_run_id", "scaling_basis", "scaling_multiplier", "scaling_efficiency",
                      "serial_fraction", "cost_efficiency")}
    experiments = out["experiment"].fillna("").astype(str).to_numpy()
    study = experiments.astype(object)
    used = out[[c for c in SCALING_INPUTS if c in out]]  # slicing the whole wide frame per experiment is slow
    for name in pd.unique(experiments):
        in_experiment = np.flatnonzero(experiments == name)
        series, labels = scaling_series(used.iloc[in_experiment])
        for number, label in enumerate(labels):
            idx = in_experiment[series == number]
            if label:
                study[idx] = f"{name} ({label})"
            _add_series(used.iloc[idx], idx, set(used["run_id"].iloc[in_experiment]), cols, notes)
    out["scaling_study"] = pd.Series(study, index=out.index, dtype="string")
    for c, values in cols.items():
        out[c] = pd.Series(values, index=out.index, dtype="string" if values.dtype == object else float)
    return out


TEXT = ("scaling_type", "baseline_run_id", "scaling_basis")


WORK_TOLERANCE = 0.02
"""Relative spread within which the work of the runs of a series counts as equal (rates and step times are
printed rounded: seed 002's samples per device per step lie within 0.4 % of 32)."""


def scaling_type(group: pd.DataFrame, basis: str | None) -> str | None:
    """``strong`` or ``weak`` for one series measured at two or more device
    counts, from the work of an optimizer step: strong where every run does the
    same work per step, weak where every run does the same work per
    data-parallel replica (``gpus / (tp · pp · cp)``: ``data_parallel``) while
    the total grows. The work per step is read, in this order, from the
    samples and the tokens the runs processed (rate × step time:
    ``samples_per_s · step_time_s``, ``tokens_per_s · step_time_s``) and from
    the configured ``global_batch_size``; the first that every run has and
    that tells one of the two decides (equal within :data:`WORK_TOLERANCE`).
    Otherwise strong where the runs processed the same total work (``tokens``,
    else ``samples``) or the series is compared by elapsed time (``basis``:
    equal work assumed); else None."""
    if group["gpus"].nunique() < 2:
        return None
    replicas = _column(group, "data_parallel").fillna(_column(group, "gpus"))
    step = _column(group, "step_time_s")
    for per_step in (_column(group, "samples_per_s") * step, _column(group, "tokens_per_s") * step,
                     _column(group, "global_batch_size")):
        if per_step.notna().all() and (per_step > 0).all():
            if _equal(per_step):
                return "strong"
            if replicas.notna().all() and _equal(per_step / replicas):
                return "weak"
    for total in (_column(group, "tokens"), _column(group, "samples")):
        if total.notna().all() and (total > 0).all() and _equal(total):
            return "strong"
    return "strong" if basis is not None and basis.startswith("elapsed") else None


def _column(group: pd.DataFrame, name: str) -> pd.Series:
    """``group[name]`` as floats; all NaN where the column is missing."""
    return group[name].astype(float) if name in group else pd.Series(np.nan, index=group.index)


def _equal(values: pd.Series) -> bool:
    """Whether positive ``values`` lie within :data:`WORK_TOLERANCE` of each other (largest / smallest − 1)."""
    return bool(values.max() <= values.min() * (1 + WORK_TOLERANCE))


def scaling_series(group: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """The scaling series of one experiment's runs: per run the number of its
    series, and per series a label (``micro-batch 8``; ``""`` when the
    experiment is one series). The runs of a series differ only in the device
    count and what follows from it: an experiment is split by each setting of
    :data:`SERIES_SETTINGS` and by the batch per device (micro-batch ×
    accumulation) in which runs on the same device count differ (a sweep of
    micro-batch sizes at 1 and 2 devices is two series). Runs alike in all of
    them on one device count are repeats. A label names what every run of its
    series is: ``micro-batch 4 × 2 accumulation or micro-batch 8`` for a series
    of 8 samples per device made both ways."""
    devices = group["gpus"].fillna(-1.0).to_numpy()
    if len(np.unique(devices)) == len(devices):  # one run per device count: no two runs to tell apart
        return np.zeros(len(group), dtype=int), [""]
    settings = group[[c for c in SERIES_SETTINGS if c in group]].astype("string")
    if "micro_batch_size" in group:
        accum = group["grad_accum_steps"].fillna(1.0) if "grad_accum_steps" in group else 1.0
        settings = settings.assign(batch=(group["micro_batch_size"] * accum).astype("string"))
    varies = [c for c in settings if (settings[c].fillna("").groupby(devices).nunique() > 1).any()]
    if not varies:
        return np.zeros(len(group), dtype=int), [""]
    series, _ = pd.factorize(pd.MultiIndex.from_frame(settings[varies].fillna("")))
    members = [np.flatnonzero(series == number) for number in range(series.max() + 1)]
    return series, [", ".join(" or ".join(dict.fromkeys(_setting_label(group.iloc[i], c) for i in at)) for c in varies)
                    for at in members]


def _setting_label(run: pd.Series, column: str) -> str:
    """``micro-batch 8 × 2 accumulation``, ``precision bf16``: one setting of a run, in words."""
    if column == "batch":
        if pd.isna(run["micro_batch_size"]):
            return "micro-batch unknown"
        accum = run.get("grad_accum_steps")
        text = f"micro-batch {run['micro_batch_size']:g}"
        return text if pd.isna(accum) or accum == 1 else f"{text} × {accum:g} accumulation"
    value = run[column]
    return f"{SERIES_SETTINGS[column]} {'unknown' if pd.isna(value) else format(value, 'g') if isinstance(value, float) else value}"


def _add_series(group: pd.DataFrame, idx: np.ndarray, experiment: set[str], cols: dict[str, np.ndarray],
                notes: list[list[str]]) -> None:
    """Fill ``cols`` at the positions ``idx`` with the scaling of one series
    (``group``: its runs; ``experiment``: the run_ids of its experiment): against
    the baseline run named in ``baseline_run_id``, else the mean speed of the
    runs on the fewest devices (the baseline and its repeats)."""
    basis, speed, measure = _speed(group)
    given = group["scaling_type"] if "scaling_type" in group else pd.Series(pd.NA, index=group.index)
    kind = given.astype(object).where(given.notna(), scaling_type(group, basis)).to_numpy(object)
    cols["scaling_type"][idx] = kind
    why = _why_no_type(group)
    for i in idx[pd.isna(kind) & group["gpus"].notna().to_numpy(bool)]:
        notes[i].append(f"scaling_type: {why}")
    base, named, note = _baseline(group, experiment)
    for i in idx if note else ():
        notes[i].append(note)
    if base is None:  # no device count: derive says so
        return
    if basis is None:
        for i in idx:
            notes[i].append("scaling: no throughput or elapsed time in any run")
        return
    gpus = group["gpus"].to_numpy(float)
    b = group.index.get_loc(base)
    at_base = gpus == gpus[b] if named is None else np.arange(len(group)) == b
    base_speed = np.nanmean(speed[at_base]) if np.isfinite(speed[at_base]).any() else np.nan
    if not base_speed > 0:
        for i in idx:
            notes[i].append(f"scaling: the baseline {group['run_id'].iloc[b]!r} has no positive {measure}")
        return
    for i in idx[np.isnan(speed)]:
        notes[i].append(f"scaling: no {measure} in this run, and its experiment is compared by {measure}")
    rel = gpus / gpus[b]
    mult = speed / base_speed
    eff = mult / rel
    price = group["price_per_gpu_hour"].to_numpy(float) if "price_per_gpu_hour" in group else np.full(len(idx), np.nan)
    cols["baseline_run_id"][idx] = group["run_id"].iloc[b]
    cols["scaling_basis"][idx] = basis
    cols["scaling_multiplier"][idx] = mult
    cols["scaling_efficiency"][idx] = eff
    weak = kind == "weak"
    cols["serial_fraction"][idx] = np.where(weak, np.nan, karp_flatt(mult, rel))
    for i in idx[weak & (rel > 1)]:
        notes[i].append("serial_fraction: weak scaling (the same work per device), and the Karp–Flatt serial "
                        "fraction assumes the same total work")
    for i in idx[rel <= 1]:
        notes[i].append("serial_fraction: not above the baseline's device count (Karp–Flatt compares more "
                        "devices with fewer)")
    cols["cost_efficiency"][idx] = eff * price[b] / price
    if not np.isfinite(price[b]):
        for i in idx[np.isfinite(price) & np.isfinite(eff)]:
            notes[i].append(f"cost_efficiency: the baseline {group['run_id'].iloc[b]!r} has no price_per_gpu_hour")


def _why_no_type(group: pd.DataFrame) -> str:
    """Why :func:`scaling_type` gives a series no type (where none is given)."""
    if group["gpus"].nunique() < 2:
        return "the study has runs on one device count"
    if "global_batch_size" in group and group["global_batch_size"].notna().all():
        return "neither the same global batch nor the same batch per replica in every run: give scaling_type"
    return "global_batch_size unknown in some run: give scaling_type"


def _speed(group: pd.DataFrame) -> tuple[str | None, np.ndarray, str]:
    """The experiment's comparable speed per run (NaN where a run lacks it),
    the basis (``throughput`` or ``elapsed (equal work assumed)``; None when
    no run has either) and the measure compared, for notes."""
    counts = {c: int(group[c].notna().sum()) for c in ("tokens_per_s", "samples_per_s") if c in group}
    if counts and max(counts.values()) > 0:
        column = max(counts, key=counts.__getitem__)  # the first of equal counts: tokens/s
        return "throughput", group[column].to_numpy(float), column
    if "elapsed_s" in group and group["elapsed_s"].notna().any():
        return "elapsed (equal work assumed)", 1.0 / group["elapsed_s"].to_numpy(float), "elapsed_s"
    return None, np.array([]), ""


def _baseline(group: pd.DataFrame, experiment: set[str]) -> tuple[object | None, str | None, str]:
    """Index label of the baseline run of a series (the named one, else the
    first run with the fewest devices; None where no run has a device count),
    the run_id named (None: none used) and a note when the named one is not
    among the experiment's runs (``experiment``: their run_ids) or the runs
    name different ones (a series has one baseline)."""
    note = ""
    if "baseline_run_id" in group:
        named = group["baseline_run_id"].dropna().unique()
        if len(named) == 1:
            hit = group.index[group["run_id"] == named[0]]
            if len(hit) == 1:
                return hit[0], str(named[0]), note
            if named[0] not in experiment:
                note = f"scaling: baseline_run_id {named[0]!r} is not among the loaded runs; baseline: fewest devices"
        elif len(named) > 1:
            note = (f"scaling: the runs name different baseline_run_ids ({', '.join(map(repr, sorted(named)))}) "
                    "but an experiment has one baseline; baseline: fewest devices")
    fewest = group.index[group["gpus"] == group["gpus"].min()]
    return (fewest[0] if len(fewest) else None), None, note
