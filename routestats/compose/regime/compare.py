"""The cross-architecture regime report: several models' certificates side by side by normalised depth."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from routestats.compose.skeleton import build_report, generated_now
from routestats.regime.compare import compare_models
from routestats.claim import Check, Claim
from routestats.report import Column, Figure, Report, Section, Table, counted, section
from routestats.settings import AnalysisSettings

__all__ = ["build_comparison_report", "comparison_terminal_tables", "PROBE"]

PROBE = 64  # the probe size of the depth profile (capped at the narrowest width); nested sizes: the sensitivity
DEPTH_KEY = (Column("Model", "model", "text"), Column("Layer", "layer", "int"), Column("Depth", "depth", "num", 2))

SPECS = {
    "models": ("The models compared: layer count, width d, operating points (depths × prompts).",
               (Column("Model", "model", "text"), Column("Kind", "model_kind", "text"), Column("Layers", "n_layers", "int"),
                Column("d", "d", "int"), Column("Points", "points", "int"), Column("Prompts", "examples", "int"))),
    "by_depth": ("Certificate by normalised depth (layer / (layers − 1)) in a random orthonormal probe subspace of "
                 "p = {p} dimensions (METHODS B.9), the same p for every model: median (range) over prompts of "
                 "the leading switching eigenvalue λ_max and of the normalised switching dimension d_sw / dim S_proj; "
                 "'switching' counts points with λ_max > 1.",
                 (*DEPTH_KEY, Column("Points", "points", "int"), Column("Switching", "switching", "int"),
                  Column("λ_max", "lambda_max", "sig"), Column("λ_max range", ("lambda_max_min", "lambda_max_max"), "range"),
                  Column("normalised d_sw", "normalised_d_sw", "num", 3),
                  Column("range", ("normalised_d_sw_min", "normalised_d_sw_max"), "range", 3))),
    "probe_sizes": ("Sensitivity to the probe size: nested probes (the first p columns of one seeded matrix), medians "
                    "over every point of the model.",
                    (Column("Model", "model", "text"), Column("Probe p", "probe", "int"), Column("Points", "points", "int"),
                     Column("λ_max", "lambda_max", "sig"), Column("normalised d_sw", "normalised_d_sw", "num", 3))),
    "mechanisms": ("Mechanism composition (METHODS B.9): median share, over prompts, of random unit directions of the "
                   "full S that switch, by the gating that makes them switch (Q query, K key, E either, J jointly); "
                   "labels record signs, not additive shares; empty where no random direction switched.",
                   (*DEPTH_KEY, Column("Q", "Q", "num", 3), Column("K", "K", "num", 3), Column("E", "E", "num", 3),
                    Column("J", "J", "num", 3))),
    "points": ("Every operating point: the full certificate (dim S, λ_max, d_sw) and the probe's, with the checks "
               "of the operators (max |analytic − autograd|; for pretrained checkpoints, |J_T + J_Q + J_K − autograd "
               "of the model's own layer|).",
               (*DEPTH_KEY, Column("Example", "example", "int"), Column("Token", "token", "int"), Column("d", "d", "int"),
                Column("dim S", "dim_S", "int"), Column("λ_max", "lambda_max", "sig"), Column("d_sw", "d_sw", "int"),
                Column("probe λ_max", "probe_lambda_max", "sig"), Column("probe d_sw", "probe_d_sw", "int"),
                Column("max error", "max_error", "sig", 2), Column("own J error", "own_jacobian_error", "sig", 2))),
}


def scope_claim(models: pd.DataFrame, by_depth: pd.DataFrame) -> Claim:
    """What was compared: models, prompts, depths, and that the comparison is descriptive."""
    prompts = sorted(set(models["examples"]))
    depths = by_depth.groupby("model")["layer"].nunique()
    return Claim("compare_scope", f"{counted(len(models), 'model')} compared at {'–'.join(map(str, sorted({depths.min(), depths.max()})))} "
                 f"normalised depths, {'–'.join(map(str, prompts))} prompt{'' if max(prompts) == 1 else 's'} each, at the final token; descriptive: "
                 "medians and ranges over prompts, no interval.", "headline", "models", tuple(models["model"]), "model",
                 requires=(Check("every model has points", "points > 0 and examples > 0"),),
                 because=("counted from the models table's rows",), evidence=models)


def model_claims(by_depth: pd.DataFrame) -> list[Claim]:
    """Per model: how many points switch in the probe subspace, and the depths of the highest and lowest
    median normalised switching dimension."""
    out = []
    for model, rows in by_depth.groupby("model", sort=True):
        n, sw = int(rows["points"].sum()), int(rows["switching"].sum())
        ok = rows.dropna(subset=["normalised_d_sw"])
        text = f"{model}: switching certified (λ_max > 1, p = {int(rows['probe'].iloc[0])}) at {sw} of {n} points"
        if len(ok) >= 2:
            hi, lo = ok.loc[ok["normalised_d_sw"].idxmax()], ok.loc[ok["normalised_d_sw"].idxmin()]
            text += (f"; median normalised switching dimension highest at depth {hi['depth']:.2f} "
                     f"({hi['normalised_d_sw']:.3f}), lowest at depth {lo['depth']:.2f} ({lo['normalised_d_sw']:.3f})")
        out.append(Claim("compare_model", text + ".", "finding", "by_depth", tuple(rows["layer"]), "layer",
                         because=("counted from the model's rows of the table",),
                         requires=(Check("switching points are among the points", "switching <= points"),
                                   Check("normalised dimensions are shares", "normalised_d_sw != normalised_d_sw or "
                                         "(normalised_d_sw >= 0 and normalised_d_sw <= 1)")),
                         evidence=rows))
    return out


CLAIM_ORDER = ("compare_scope", "compare_model")


@dataclass(frozen=True)
class ComparisonContext:
    """The comparison frames (computed once) and their shown tables."""

    root: Path
    settings: AnalysisSettings = field(repr=False)
    say: Callable[[str], None] = field(default=lambda label: None, repr=False, compare=False)

    @functools.cached_property
    def t(self) -> dict:
        t = compare_models(self.root, probe=PROBE, directions=max(self.settings.probes, 1),
                           seed=self.settings.resampling.seed, say=self.say)
        m = t["mechanisms"]
        t["mechanisms"] = (m.pivot(index=["model", "layer", "depth"], columns="regime", values="share")
                           .reindex(columns=list("QKEJ")).reset_index().rename_axis(columns=None)
                           if len(m) else pd.DataFrame(columns=["model", "layer", "depth", *"QKEJ"]))
        return t

    @property
    def probe(self) -> int:
        return int(self.t["points"]["probe"].iloc[0])

    @functools.cached_property
    def tables(self) -> dict:
        return {name: Table(name, self.t[name], caption.replace("{p}", str(self.probe)), cols)
                for name, (caption, cols) in SPECS.items()}


@section("depth", "Switching by normalised depth")
def depth_section(ctx: ComparisonContext) -> Section:
    t = ctx.tables
    return Section(tables=(t["models"], t["by_depth"]),
                   figures=(Figure("regime-depth", "regime_depth", {"by_depth": ctx.t["by_depth"], "points": ctx.t["points"]}),),
                   text="Each model's leading switching eigenvalue and normalised switching dimension at the same "
                        "normalised depths, in probe subspaces of the same size, so models of different width compare.",
                   claims=(scope_claim(t["models"].frame, t["by_depth"].frame),
                           *model_claims(t["by_depth"].frame)))


@section("mechanisms", "Mechanism composition and probe size")
def mechanism_section(ctx: ComparisonContext) -> Section:
    t = ctx.tables
    return Section(tables=(t["mechanisms"], t["probe_sizes"], t["points"]))


SECTIONS = (depth_section, mechanism_section)


def build_comparison_report(root: str | Path, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """The cross-architecture report of every model folder below ``root`` (:mod:`routestats.regime.compare`)."""
    s = settings or AnalysisSettings()
    root = Path(root)
    ctx = ComparisonContext(root, s, progress or (lambda label: None))
    models = ctx.t["models"]
    methods = ("Operators per model and operating point as in the regime report (float64, analytic closed forms checked "
               "against autograd; pretrained checkpoints also against the model's own layer). Depth = layer / (layers − "
               f"1). Projected certificates on nested random orthonormal probes (p = 32, 64, 128, 256 up to each model's "
               f"width; p = {ctx.probe} in the depth profile), seed {s.resampling.seed}; mechanism composition from "
               f"{max(s.probes, 1)} random "
               "unit directions of S per point.")
    prov = {"analysis": {"generated": generated_now(), "settings": {"probes": s.probes, "seed": s.resampling.seed,
                                                                    "probe": ctx.probe}},
            "models": models.to_dict("records")}
    return build_report(ctx, SECTIONS, title=f"regime switching across models: {root.name}",
                        subtitle=f"{counted(len(models), 'model')} · {counted(int(models['points'].sum()), 'operating point')} · {root}",
                        methods=methods, provenance=prov, facts={"n_models": len(models), "source": str(root)},
                        claim_order=CLAIM_ORDER)


def comparison_terminal_tables(rep: Report) -> list[tuple[str, pd.DataFrame]]:
    """(title, frame) pairs ``routestats regime`` prints for a comparison: the depth profile."""
    cols = ["model", "layer", "depth", "points", "switching", "lambda_max", "normalised_d_sw"]
    return [(rep.title, rep.frame("by_depth")[cols])]
