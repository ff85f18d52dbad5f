"""Number formatting and table layouts shared by the HTML and LaTeX outputs.

A :class:`TableSpec` says which columns of a report frame are shown, with which header,
format and caption; :func:`format_cells` turns a frame into display strings. Nothing here
computes a statistic: the frames come finished from :mod:`routestats.pair_report`.

Examples
--------
>>> fmt_p(0.00002), fmt_p(0.0123), fmt_p(float("nan"))
('< 0.001', '0.012', '–')
>>> fmt_ci(0.11241, 0.1383)
'[0.112, 0.138]'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

DASH = "–"


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA


def fmt_num(x, digits: int = 3) -> str:
    """Fixed decimals; missing values as an en dash."""
    if _missing(x):
        return DASH
    return f"{float(x):.{digits}f}"


def fmt_sig(x, digits: int = 3) -> str:
    """Significant digits, for values spanning orders of magnitude (eigenvalues, errors).

    >>> fmt_sig(1694570.3), fmt_sig(0.000123456), fmt_sig(float("nan"))
    ('1.69e+06', '0.000123', '–')
    """
    if _missing(x):
        return DASH
    return f"{float(x):.{digits}g}"


def fmt_int(x) -> str:
    return DASH if _missing(x) else f"{int(x):d}"


def fmt_p(p, digits: int = 3) -> str:
    """p-values: '< 0.001' below 10^-digits, else fixed decimals."""
    if _missing(p):
        return DASH
    floor = 10.0 ** (-digits)
    return f"< {floor:.{digits}f}" if p < floor else f"{p:.{digits}f}"


def fmt_ci(lo, hi, digits: int = 3) -> str:
    if _missing(lo) or _missing(hi):
        return DASH
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


@dataclass(frozen=True)
class Column:
    header: str
    source: str | tuple[str, str]  # a column, or (low, high) for a CI
    kind: str = "num"  # num, int, p, sig (significant digits), ci (low, high), range (first, last), text
    digits: int = 3


@dataclass(frozen=True)
class TableSpec:
    name: str
    caption: str
    columns: tuple[Column, ...]
    bold_max: tuple[str, ...] = ()  # columns whose maximum is marked (within group_by)
    group_by: str | None = None
    notes: str = ""
    subject: str = ""  # user-supplied text appended to the caption (run ids); always escaped verbatim
    extra: dict = field(default_factory=dict)


def format_cells(df: pd.DataFrame, spec: TableSpec) -> tuple[list[str], list[list[dict]]]:
    """Headers and rows of cells ``{"text", "value", "bold", "numeric"}`` for a spec."""
    headers = [c.header for c in spec.columns]
    marks = set()
    for col in spec.bold_max:
        groups = [df] if spec.group_by is None else [g for _, g in df.groupby(spec.group_by, sort=False)]
        for g in groups:
            if len(g) and g[col].notna().any():
                marks.add((g[col].idxmax(), col))
    rows = []
    for idx, r in df.iterrows():
        cells = []
        for c in spec.columns:
            if c.kind in ("ci", "range"):
                lo, hi = r[c.source[0]], r[c.source[1]]
                text = fmt_ci(lo, hi, c.digits) if c.kind == "ci" else f"{fmt_int(lo)}–{fmt_int(hi)}"
                cells.append({"text": text, "value": None if _missing(lo) else float(lo), "bold": False, "numeric": True})
                continue
            v = r[c.source]
            if c.kind == "num":
                text = fmt_num(v, c.digits)
            elif c.kind == "int":
                text = fmt_int(v)
            elif c.kind == "p":
                text = fmt_p(v, c.digits)
            elif c.kind == "sig":
                text = fmt_sig(v, c.digits)
            else:
                text = DASH if _missing(v) else str(v)
            numeric = c.kind in ("num", "int", "p", "sig")
            cells.append({"text": text, "value": float(v) if numeric and not _missing(v) else (None if numeric else str(v)),
                          "bold": (idx, c.source) in marks, "numeric": numeric})
        rows.append(cells)
    return headers, rows


def table_context(df: pd.DataFrame, spec: TableSpec) -> dict:
    """One table as the HTML template sees it: name, headers, rows of cells, caption."""
    headers, rows = format_cells(df, spec)
    return {"name": spec.name, "headers": headers, "rows": rows, "caption": spec.caption}


def embedded(figures: dict, slug: str, name: str | None) -> str | None:
    """Base64 PNG of figure ``name`` of section ``slug`` for a data: URI, or None."""
    import base64

    png = figures.get((slug, name)) if name else None
    return base64.b64encode(png).decode("ascii") if png else None


def section_lookups(tables: dict, specs: dict, figures: dict, slug: str):
    """The ``table(name)`` and ``fig(name)`` helpers of an HTML section builder."""
    return (lambda name: table_context(tables[name], specs[name])), (lambda name: embedded(figures, slug, name))


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def report_specs(rep) -> dict[str, TableSpec]:
    """Table layouts for a :class:`routestats.pair_report.PairReport`."""
    conf = pct(rep.settings.confidence)
    b, v = "baseline", "variant"
    specs = {
        "performance": TableSpec(
            "performance", "Task performance (masked structure modelling).",
            (Column("Model", "role", "text"), Column("Run", "run_id", "text"), Column("Steps", "steps", "int"),
             Column("Final train loss", "final_train_loss", "num", 4), Column("Eval loss", "eval_loss", "num", 4),
             Column("Eval accuracy", "eval_accuracy", "num", 4))),
        "layers": TableSpec(
            "layers", f"Same-field attention mass (SFM) and entropy (nats) per layer at step {rep.step}, "
                      f"mean over {rep.n_examples} examples; the highest SFM of each model in bold.",
            (Column("Model", "role", "text"), Column("Layer", "layer", "int"), Column("SFM", "sfm"),
             Column("Entropy", "entropy"), Column("Examples", "n_examples", "int")),
            bold_max=("sfm",), group_by="role"),
        "effects": TableSpec(
            "effects", f"Paired SFM effects (variant − baseline) per layer: mean difference, {conf} percentile "
                       f"bootstrap CI ({rep.settings.resamples:,} resamples), d_z, and two-sided sign-flip p "
                       f"({rep.settings.permutations:,} draws) Holm-adjusted over layers.",
            (Column("Layer", "layer", "int"), Column(f"SFM {b}", "baseline_mean"), Column(f"SFM {v}", "variant_mean"),
             Column("Δ", "mean_diff"), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
             Column("p (raw)", "p_raw", "p"), Column("p (Holm)", "p_holm", "p"), Column("n", "n", "int"))),
        "entropy_effects": TableSpec(
            "entropy_effects", "Paired entropy effects (nats; variant − baseline), same procedures as the SFM table.",
            (Column("Layer", "layer", "int"), Column(f"Entropy {b}", "baseline_mean"),
             Column(f"Entropy {v}", "variant_mean"), Column("Δ", "mean_diff"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
             Column("p (Holm)", "p_holm", "p"))),
        "adjusted": TableSpec(
            "adjusted", "Opportunity-adjusted SFM, (SFM − O_e)/(1 − O_e): 0 = uniform over valid keys, 1 = only "
                        "same-field keys. Examples with one visible field (O_e = 1) are excluded from every layer.",
            (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("Excluded", "excluded", "int"),
             Column("Mean O_e", "mean_opportunity"), Column(f"Adj. {b}", "baseline_mean"),
             Column(f"Adj. {v}", "variant_mean"), Column("Δ adj.", "mean_diff"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (Holm)", "p_holm", "p"))),
    }
    if getattr(rep, "lengths", None) is not None:
        specs["lengths"] = TableSpec(
            "lengths", "Evaluated token lengths (Table 11 layout): mean, population SD, linear-interpolation "
                       "quantiles and saturation at the evaluation cap.",
            (Column("Split", "split", "text"), Column("n", "n", "int"), Column("Mean", "mean", "num", 1),
             Column("SD", "sd_population", "num", 1), Column("Median", "median", "num", 1), Column("IQR", "iqr", "num", 1),
             Column("P90", "p90", "num", 1), Column("P95", "p95", "num", 1), Column("Cap", "cap", "int"),
             Column("Saturated", "saturation_count", "int"), Column("Rate", "saturation_rate", "num", 3)))
        specs["length_association"] = TableSpec(
            "length_association", f"Length association (Table 12A): Spearman ρ between evaluated length and the "
                                  f"per-example Δ SFM, percentile bootstrap CI ({rep.settings.length_resamples:,} "
                                  "resamples), Holm over layers.",
            (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("ρ", "rho"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (raw)", "p_raw", "p"),
             Column("p (Holm)", "p_adj", "p")))
        specs["length_bins"] = TableSpec(
            "length_bins", "Equal-count length quartile bins (by rank of length, then source index): mean and median "
                           "Δ SFM per layer.",
            (Column("Bin", "bin", "int"), Column("Layer", "layer", "int"), Column("n", "count", "int"),
             Column("Lengths", ("min_length", "max_length"), "range"), Column("Mean Δ", "mean_delta"),
             Column("Median Δ", "median_delta")))
    if rep.gradient_checkpoints is not None:
        g = rep.gradient_checkpoints
        lo, up = int(g["lower_layer"].iloc[0]), int(g["upper_layer"].iloc[0])
        specs["gradients"] = TableSpec(
            "gradients", f"Q/K/V weight-gradient norm ratio L{up}/L{lo} (after accumulation, before clipping): "
                         f"mean and SD of the per-step ratios over the last {rep.settings.gradient_window} steps "
                         "ending at each checkpoint.",
            (Column("Model", "role", "text"), Column("Step", "checkpoint_step", "int"),
             Column("Window", ("window_start_step", "window_end_step"), "range"), Column("Steps", "n_steps", "int"),
             Column("Mean ratio", "mean_ratio"), Column("SD", "sd_ratio"),
             Column(f"Norm L{lo}", "mean_lower_norm", "num", 4), Column(f"Norm L{up}", "mean_upper_norm", "num", 4)))
    return specs
