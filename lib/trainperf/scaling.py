"""Scaling across devices: the scaling studies of each experiment (:func:`scaling_studies`), their multiplier,
efficiency, Karp–Flatt serial fraction and cost efficiency (:func:`add_scaling`), and Amdahl's law and the Universal
Scalability Law fitted to throughput (:func:`fit`). The formulas and rules: README.md, "Scaling"; the fits:
docs/statistics.md, "Scaling fits"."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from trainperf.invariants import check_scaling
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
"""name -> (multiplier function, its parameter names, bounds, initial guess). ``gamma`` of ``X(N) = gamma · law(N)``
(throughput of one device, the units of the data) is fitted too, bounded below by 0."""
NAMES = {"amdahl": "Amdahl", "usl": "USL"}
AT_BOUND = 1e-9
"""A fitted parameter closer than this to 0 sits at its lower bound."""


@dataclass
class ScalingFit:
    """A scaling law fitted by least squares on throughput, ``X(N) = γ · S(N)`` (docs/statistics.md, "Scaling fits").
    ``devices``: as given (counts, or relative to a baseline); ``throughput`` in any unit (tokens/s, or multipliers:
    γ ≈ 1). ``params``: the law's, then ``gamma``; ``stderr`` (NaN unless :attr:`has_band`); ``intervals``: 95 %,
    clipped to the bounds; ``rmse`` (units of ``throughput``) and ``relative_rmse`` (fraction of the throughput)."""

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
        return _curve(self.law, np.asarray(devices, dtype=float), list(self.params.values()))

    def multiplier(self, devices: np.ndarray | float) -> np.ndarray:
        """Fitted multiplier ``S(N) = X(N) / γ``: throughput relative to one device (``N = 1``)."""
        return LAWS[self.law][0](np.asarray(devices, dtype=float), *list(self.params.values())[:-1])

    @property
    def name(self) -> str:
        """The law as people write it: ``Amdahl``, ``USL``."""
        return NAMES[self.law]

    @property
    def has_band(self) -> bool:
        """Whether the fit had more distinct device counts than parameters (else ``stderr`` and :meth:`band`: NaN)."""
        return bool(np.all(np.isfinite(self.covariance)))

    @property
    def why_no_band(self) -> str:
        """Why the fit has no band: ``no band (3 device counts, 3 parameters: measure a 4th device count)``."""
        counts, params = len(np.unique(self.devices)), len(self.params)  # 2 (Amdahl) or 3 (USL) parameters
        return (f"no band ({counts} device counts, {params} parameters: measure a {params + 1}"
                f"{'rd' if params == 2 else 'th'} device count" + ("" if counts == params else " and more") + ")")

    @property
    def peak(self) -> float:
        """Where the fitted multiplier peaks (units of ``devices``): the USL's ``sqrt((1 − σ) / κ)``; ``inf`` where
        it keeps rising (Amdahl, κ at its bound, σ ≥ 1)."""
        if self.law != "usl" or not self.params["kappa"] > AT_BOUND or not self.params["sigma"] < 1:
            return math.inf
        return math.sqrt((1 - self.params["sigma"]) / self.params["kappa"])

    def band(self, devices: np.ndarray | float, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bound of the fitted throughput at ``devices`` (units of the data; NaN without a
        covariance): the central ``level`` of 4,000 parameter sets from the fit's normal approximation (seed 0),
        clipped to the law's bounds, widened by the relative RMSE (README.md, "Scaling": one-sided at a bound)."""
        p = np.atleast_1d(np.asarray(devices, dtype=float))
        if not self.has_band:
            nan = np.full(p.shape, np.nan)
            return nan, nan.copy()
        theta = np.random.default_rng(0).multivariate_normal(list(self.params.values()), self.covariance, size=4000)
        theta = np.clip(theta, *_bounds(self.law))
        curves = _curve(self.law, p, theta.T[..., np.newaxis])  # (draws, points): every draw at once
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
    """``0.0312 ± 0.004``, or ``0 (at its bound)`` where the fit pushed it to 0 (its standard error then moot)."""
    if abs(value) < AT_BOUND:
        return "0 (at its bound)"
    return f"{value:.4g}" + ("" if math.isnan(stderr) else f" ± {stderr:.2g}")


def _curve(law: str, devices: np.ndarray, theta: Sequence[float] | np.ndarray) -> np.ndarray:
    """``γ · S(devices)`` for ``theta`` (the law's parameters, then γ; numbers, or arrays that broadcast)."""
    return theta[-1] * LAWS[law][0](devices, *theta[:-1])


def _bounds(law: str) -> tuple[list[float], list[float]]:
    """Lower and upper bounds of the law's parameters, then ``gamma``'s."""
    lo, hi = LAWS[law][2]
    return [*lo, 0.0], [*hi, np.inf]


def fit(devices: np.ndarray, throughput: np.ndarray, law: str = "usl") -> ScalingFit:
    """Fit ``X(N) = γ · S(N)`` (``S``: ``amdahl`` or ``usl``) to the throughput measured at ``devices`` (docs/
    statistics.md, "Scaling fits"). ValueError with fewer than two distinct device counts."""
    if law not in LAWS:
        raise ValueError(f"unknown scaling law {law!r}; known: {', '.join(LAWS)}")
    p = np.asarray(devices, dtype=float)
    x = np.asarray(throughput, dtype=float)
    keep = np.isfinite(p) & np.isfinite(x)
    p, x = p[keep], x[keep]
    if len(np.unique(p)) < 2:
        raise ValueError("a scaling fit needs measurements at two or more device counts")
    _, law_names, _, guess = LAWS[law]
    names = (*law_names, "gamma")

    from scipy.optimize import OptimizeWarning, curve_fit  # imported here: a second to load, fits only

    with warnings.catch_warnings(action="ignore", category=OptimizeWarning):  # no covariance: handled below
        params, cov = curve_fit(lambda n, *theta: _curve(law, n, theta), p, x, p0=[*guess, float(np.max(x / p))],
                                bounds=_bounds(law), x_scale="jac", maxfev=20000)
    if len(np.unique(p)) <= len(names):  # repeats measure noise, not whether the law's shape fits: no band
        cov = np.full((len(names), len(names)), np.nan)
    stderr = {n: float(math.sqrt(v)) if v >= 0 else math.nan for n, v in zip(names, np.diag(cov))}
    t = t_quantile(len(p) - len(names))  # degrees of freedom: points less parameters
    lo, hi = _bounds(law)
    intervals = {n: (max(lo[i], float(params[i]) - t * stderr[n]), min(hi[i], float(params[i]) + t * stderr[n]))
                 for i, n in enumerate(names)}
    residuals = x - _curve(law, p, params)
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


def karp_flatt(multiplier: np.ndarray, devices: np.ndarray, weak: np.ndarray | bool = False) -> np.ndarray:
    """Karp–Flatt serial fraction ``(1/S − 1/p) / (1 − 1/p)``; NaN where ``p <= 1`` or the scaling is ``weak`` (it
    assumes the same total work)."""
    s = np.asarray(multiplier, dtype=float)
    p = np.asarray(devices, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / s - 1.0 / p) / (1.0 - 1.0 / p)
    return np.where((p > 1) & ~np.asarray(weak, bool), e, np.nan)


SERIES_SETTINGS = {"platform": "platform", "model": "model", "n_params": "parameters", "precision": "precision",
                   "strategy": "strategy", "tensor_parallel": "tensor parallel",
                   "pipeline_parallel": "pipeline parallel", "context_parallel": "context parallel",
                   "seq_len": "sequence length",
                   "activation_checkpointing": "activation checkpointing", "compiled": "compiled",
                   "extra_configuration": "configuration"}
"""Settings (column: words) that split an experiment into series where runs on one device count differ in them."""

SCALING_INPUTS = ("run_id", "experiment", "gpus", "baseline_run_id", "tokens_per_s", "samples_per_s", "elapsed_s",
                  "step_time_s", "tokens", "samples", "price_per_gpu_hour", "micro_batch_size", "grad_accum_steps",
                  "global_batch_size", "data_parallel", "scaling_type", *SERIES_SETTINGS)
"""The columns :func:`add_scaling` reads from a run."""

SCALING_COLUMNS = ("scaling_type", "baseline_run_id", "scaling_basis", "scaling_multiplier", "scaling_efficiency",
                   "serial_fraction", "cost_efficiency")
"""The per-study columns :func:`add_scaling` fills."""
TEXT = ("scaling_type", "baseline_run_id", "scaling_basis")


@dataclass
class Study:
    """One scaling study of an experiment: its runs' positions in the experiment's rows, its label (``""``: the
    only study), its type where the work held constant tells it (None: given, or :func:`scaling_type`), per run
    whether it is the run's primary study (the one its runs-table row shows), and an assumption to note."""

    members: np.ndarray
    label: str
    kind: str | None
    primary: np.ndarray
    note: str = ""


def add_scaling(runs: pd.DataFrame, notes: list[list[str]]) -> pd.DataFrame:
    """A new frame of ``runs`` (with ``run_id``, ``experiment``, ``gpus`` and the derived throughputs) with
    ``scaling_study``, ``second_scaling_study`` and :data:`SCALING_COLUMNS` per study (:func:`scaling_studies`; a
    run in two has its primary one's figures); why a row's scaling stays empty goes to ``notes[position]``."""
    out = runs.copy()
    cols = _empty_columns(len(out))
    experiments = out["experiment"].fillna("").astype(str).to_numpy()
    study, second = experiments.astype(object), np.full(len(out), None, dtype=object)
    codes, names = pd.factorize(experiments)
    order = np.argsort(codes, kind="stable")  # each experiment's runs side by side, in their order
    used = out[[c for c in SCALING_INPUTS if c in out]].iloc[order]  # a slice per experiment: taking rows is slow
    sizes = np.bincount(codes)
    for name, stop, size in zip(names, np.cumsum(sizes), sizes):
        in_experiment, runs_of = order[stop - size:stop], used.iloc[stop - size:stop]
        for found in scaling_studies(runs_of):
            idx = in_experiment[found.members]
            title = f"{name} ({found.label})" if found.label else name
            study[idx[found.primary]] = title
            second[idx[~found.primary]] = title
            group = runs_of if len(idx) == len(runs_of) else runs_of.iloc[found.members]
            here, said = _series_scaling(group, set(runs_of["run_id"]), found.kind)
            for j in np.flatnonzero(found.primary):
                notes[idx[j]] += [found.note, *said[j]] if found.note else said[j]
                for c, values in here.items():
                    cols[c][idx[j]] = values[j]
    for c, values in {"scaling_study": study, "second_scaling_study": second, **cols}.items():
        out[c] = pd.Series(values, index=out.index, dtype="string" if values.dtype == object else float)
    return out


def second_study_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """The derived runs in a second (weak) study, once more each as a row of it: ``scaling_study`` the second one
    and the scaling columns measured within it, as :func:`add_scaling` does. Empty where no run is in two studies."""
    if "second_scaling_study" not in runs or runs["second_scaling_study"].isna().all():
        return runs.iloc[:0]
    copies = runs[runs["second_scaling_study"].notna()]
    copies = copies.assign(scaling_study=copies["second_scaling_study"], second_scaling_study=copies["scaling_study"])
    out = []
    for name, rows in copies.groupby("scaling_study", sort=False):
        members = runs[runs["scaling_study"] == name]  # none where each of its runs is in a strong study too
        baseline = members["baseline_run_id"].iloc[0] if len(members) else pd.NA
        group = pd.concat([members, rows.assign(scaling_type="weak", baseline_run_id=baseline)])
        cols, _ = _series_scaling(group[[c for c in SCALING_INPUTS if c in group]], set(runs["run_id"]), None)
        out.append(rows.assign(**{c: values[len(members):] for c, values in cols.items()}))
    found = pd.concat(out).astype({c: runs[c].dtype for c in SCALING_COLUMNS if c in runs})
    said: list[list[str]] = [[] for _ in range(len(found))]
    check_scaling(found, said)  # an impossible figure of the second study is emptied there too, and said
    notes = found["notes"] if "notes" in found else pd.Series(pd.NA, index=found.index)
    joined = ["; ".join(filter(None, [n if isinstance(n, str) else "", *s])) or pd.NA for n, s in zip(notes, said)]
    return found.assign(notes=pd.Series(joined, index=found.index, dtype="string"))


def _empty_columns(length: int) -> dict[str, np.ndarray]:
    return {c: np.full(length, np.nan, dtype=object if c in TEXT else float) for c in SCALING_COLUMNS}


WORK_TOLERANCE = 0.02
"""Relative spread within which the work of the runs of a series counts as equal (rates and step times are
printed rounded: seed 002's samples per device per step lie within 0.4 % of 32)."""


def scaling_studies(group: pd.DataFrame) -> list[Study]:
    """The scaling studies of one experiment's runs (README.md, "Scaling"): per series (:func:`_setting_series`),
    its strong and weak studies (:func:`_constant_work`), else the series as one study. Labels say what every run
    of a study is (``precision bf16, global batch 8``); an experiment that is one study has none."""
    series, labels = _setting_series(group)
    out = []
    for number, label in enumerate(labels):
        at = np.flatnonzero(series == number)
        rows = group.iloc[at]
        found = [] if "scaling_type" in rows and rows["scaling_type"].notna().any() else _constant_work(rows)
        if len(found) == 1 and len(found[0].members) == len(at):  # the whole series: no label
            found[0].label = ""
        for study in found or [Study(np.arange(len(at)), "", None, np.ones(len(at), bool))]:
            study.members = at[study.members]
            study.label = ", ".join(part for part in (label, study.label) if part)
            out.append(study)
    return out


def _constant_work(rows: pd.DataFrame) -> list[Study]:
    """The strong and weak studies of one series, then a study per global batch of the runs in neither, by the
    measure of the work that leaves the fewest runs in neither (the first of equals); none where none finds one."""
    devices = _column(rows, "gpus").to_numpy()
    if len(np.unique(devices)) < 2:  # one device count: no study spans two
        return []
    replicas = _column(rows, "data_parallel").fillna(_column(rows, "gpus"))
    per = "per device" if (replicas == _column(rows, "gpus")).all() else "per replica"
    step = _column(rows, "step_time_s")
    accumulation = _column(rows, "grad_accum_steps")
    configured = _column(rows, "micro_batch_size") * accumulation.fillna(1.0) * replicas
    assumed = "scaling_study: grad_accum_steps unknown, taken as 1" if accumulation.isna().any() else ""
    best: list[Study] = []
    for unit, per_step, note in (("", _column(rows, "samples_per_s") * step, ""),
                                 (" tokens", _column(rows, "tokens_per_s") * step, ""),
                                 ("", _column(rows, "global_batch_size"), ""), ("", configured, assumed)):
        if not (per_step.notna().all() and (per_step > 0).all()):
            continue
        per_replica = per_step / replicas
        found = [Study(m, f"global batch {_amount(per_step.iloc[m])}{unit}", "strong", np.ones(len(m), bool), note)
                 for m in _clusters(per_step) if len(np.unique(devices[m])) > 1]
        strong = np.isin(np.arange(len(rows)), [m for study in found for m in study.members])
        found += [Study(m, f"{_amount(per_replica.iloc[m])}{unit} {per}", "weak", ~strong[m], note)
                  for m in _clusters(per_replica) if len(np.unique(devices[m])) > 1]
        if not found:
            continue
        alone = np.setdiff1d(np.arange(len(rows)), np.concatenate([s.members for s in found]))
        if not best or len(alone) < sum(len(s.members) for s in best if s.kind is None):
            best = found + [Study(alone[m], f"global batch {_amount(per_step.iloc[alone[m]])}{unit}", None,
                                  np.ones(len(m), bool), note) for m in _clusters(per_step.iloc[alone])]
    return best


def _clusters(values: pd.Series) -> list[np.ndarray]:
    """Positions of ``values`` in groups of equal ones (each within :data:`WORK_TOLERANCE` of its smallest)."""
    groups: list[list[int]] = []
    smallest = math.nan
    for i in np.argsort(values.to_numpy(float), kind="stable"):
        if not values.iat[i] <= smallest * (1 + WORK_TOLERANCE):
            groups.append([])
            smallest = values.iat[i]
        groups[-1].append(int(i))
    return [np.array(sorted(g)) for g in groups]


def _amount(values: pd.Series) -> str:
    """The typical value of a group of equal amounts of work, for a label: ``8``, ``2,048``, ``0.5``."""
    value = float(values.median())
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def scaling_type(group: pd.DataFrame, basis: str | None) -> tuple[str | None, str]:
    """The type of a series with no study found from the work per step, and why it has none: ``strong`` where it
    spans two or more device counts and its runs processed the same ``tokens`` (else ``samples``) or it is
    compared by elapsed time (``basis``: equal work assumed); else None."""
    if group["gpus"].nunique() < 2:
        return None, "the study has runs on one device count"
    for total in (_column(group, "tokens"), _column(group, "samples")):
        if total.notna().all() and (total > 0).all() and total.max() <= total.min() * (1 + WORK_TOLERANCE):
            return "strong", ""
    if basis is not None and basis.startswith("elapsed"):
        return "strong", ""
    if "global_batch_size" in group and group["global_batch_size"].notna().all():
        return None, "neither the same global batch nor the same batch per replica in every run: give scaling_type"
    return None, "global_batch_size unknown in some run: give scaling_type"


def _column(group: pd.DataFrame, name: str) -> pd.Series:
    return group[name].astype(float) if name in group else pd.Series(np.nan, index=group.index)


def _setting_series(group: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per run the number of its series (:data:`SERIES_SETTINGS`), and per series a label (``precision bf16``;
    ``""`` when the experiment is one series)."""
    devices = group["gpus"].fillna(-1.0).to_numpy()
    if len(np.unique(devices)) == len(devices):  # one run per device count: no two runs to tell apart
        return np.zeros(len(group), dtype=int), [""]
    settings = group[[c for c in SERIES_SETTINGS if c in group]].astype("string")
    varies = [c for c in settings if (settings[c].fillna("").groupby(devices).nunique() > 1).any()]
    if not varies:
        return np.zeros(len(group), dtype=int), [""]
    series, _ = pd.factorize(pd.MultiIndex.from_frame(settings[varies].fillna("")))
    words = group[varies].astype(object).map(lambda v: "unknown" if pd.isna(v) else format(v, "g")
                                             if isinstance(v, float) else v)
    firsts = words.iloc[np.unique(series, return_index=True)[1]]  # factorize numbers the series by their first run
    return series, [", ".join(f"{SERIES_SETTINGS[c]} {v}" for c, v in run.items()) for _, run in firsts.iterrows()]


def _series_scaling(group: pd.DataFrame, experiment: set[str], found: str | None
                    ) -> tuple[dict[str, np.ndarray], list[list[str]]]:
    """The :data:`SCALING_COLUMNS` of one series' runs against the run named in ``baseline_run_id``, else the mean
    speed of the runs on the fewest devices (``found``: the type :func:`scaling_studies` found); and per run, why
    a figure stays empty."""
    cols, notes = _empty_columns(len(group)), [[] for _ in range(len(group))]

    def say(where: np.ndarray | bool, text: str) -> None:
        for i in np.flatnonzero(np.broadcast_to(where, len(group))):
            notes[i].append(text)

    basis, speed, measure = _speed(group)
    given = group["scaling_type"] if "scaling_type" in group else pd.Series(pd.NA, index=group.index)
    inferred, why = (found, "") if found else scaling_type(group, basis)
    kind = given.astype(object).where(given.notna(), inferred).to_numpy(object)
    cols["scaling_type"][:] = kind
    say(pd.isna(kind) & group["gpus"].notna().to_numpy(bool), f"scaling_type: {why}")
    base, named, note = _baseline(group, experiment)
    say(bool(note), note)
    if base is None:  # no device count: derive says so
        return cols, notes
    if basis is None:
        say(True, "scaling: no throughput or elapsed time in any run")
        return cols, notes
    gpus = group["gpus"].to_numpy(float)
    b = group.index.get_loc(base)
    at_base = gpus == gpus[b] if named is None else np.arange(len(group)) == b
    base_speed = np.nanmean(speed[at_base]) if np.isfinite(speed[at_base]).any() else np.nan
    if not base_speed > 0:
        say(True, f"scaling: the baseline {group['run_id'].iloc[b]!r} has no positive {measure}")
        return cols, notes
    say(np.isnan(speed), f"scaling: no {measure} in this run, and its experiment is compared by {measure}")
    rel = gpus / gpus[b]
    mult = speed / base_speed
    eff = mult / rel
    price = _column(group, "price_per_gpu_hour").to_numpy()
    weak = kind == "weak"
    cols.update(baseline_run_id=np.full(len(group), group["run_id"].iloc[b], dtype=object),
                scaling_basis=np.full(len(group), basis, dtype=object), scaling_multiplier=mult,
                scaling_efficiency=eff, serial_fraction=karp_flatt(mult, rel, weak),
                cost_efficiency=eff * price[b] / price)
    say(weak & (rel > 1), "serial_fraction: weak scaling (the same work per device), and the Karp–Flatt serial "
                          "fraction assumes the same total work")
    say(rel <= 1, "serial_fraction: not above the baseline's device count (Karp–Flatt compares more devices with "
                  "fewer)")
    say(~np.isfinite(price[b]) & np.isfinite(price) & np.isfinite(eff),
        f"cost_efficiency: the baseline {group['run_id'].iloc[b]!r} has no price_per_gpu_hour")
    return cols, notes


def _speed(group: pd.DataFrame) -> tuple[str | None, np.ndarray, str]:
    """The basis (``throughput`` or ``elapsed (equal work assumed)``; None when no run has either), the speed per
    run (NaN where a run lacks it) and the column compared."""
    counts = {c: int(group[c].notna().sum()) for c in ("tokens_per_s", "samples_per_s") if c in group}
    if counts and max(counts.values()) > 0:
        column = max(counts, key=counts.__getitem__)  # the first of equal counts: tokens/s
        return "throughput", group[column].to_numpy(float), column
    if "elapsed_s" in group and group["elapsed_s"].notna().any():
        return "elapsed (equal work assumed)", 1.0 / group["elapsed_s"].to_numpy(float), "elapsed_s"
    return None, np.array([]), ""


def _baseline(group: pd.DataFrame, experiment: set[str]) -> tuple[object | None, str | None, str]:
    """Index label of a series' baseline run (the named one, else the first with the fewest devices; None where no
    run has a device count), the run_id named (None: none used) and a note where the named one is not among the
    ``experiment``'s run_ids or the runs name different ones."""
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
