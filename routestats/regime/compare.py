"""The cross-architecture protocol: several models' operators side by side by normalised depth (METHODS B.9).

A comparison folder holds one folder per model, each with ``operators/`` (``python -m runners regime
MODEL_A MODEL_B ... --depths 7 --prompts FILE --out FOLDER`` writes it). At every stored operating
point the certificate is computed on the full operators and, for comparability across widths d, on
nested random orthonormal probe subspaces (the first p columns of one seeded d x max(p) matrix, p in
``probe_sizes``); the mechanism composition is taken among random switching directions of S.
Depth = layer / (n_layers - 1), with the layer count the operator index records.

:func:`compare_models` returns tidy frames:

``models``            model, model_kind, n_layers, d, points, examples
``points``            model, layer, depth, example, token, d, dim_S, lambda_max, d_sw, normalised_d_sw,
                      probe, probe_lambda_max, probe_d_sw, probe_normalised_d_sw, max_error, own_jacobian_error
``by_depth``          model, layer, depth, points, probe, switching (points with lambda_max > 1), and the median,
                      min and max over points of the probe's lambda_max and normalised d_sw
``probe_sizes``       model, probe, points, median lambda_max and normalised d_sw (the sensitivity analysis)
``mechanisms``        model, layer, depth, regime (Q, K, E, J), median share of switching directions
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S
from routestats.rundir.manifest import model_folders, read_json
from routestats.regime.certify import certify, mechanism_composition, probe_sweep
from routestats.regime.points import load_operator_points

__all__ = ["model_folders", "compare_models", "PROBE_SIZES"]

PROBE_SIZES = (32, 64, 128, 256)


def _layer_count(folder: Path) -> int:
    index = read_json(folder / S.OPERATOR_DIR / S.OPERATOR_INDEX)
    n = index.get("n_layers") if isinstance(index, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise RoutestatsError(f"{folder / S.OPERATOR_DIR / S.OPERATOR_INDEX}: no layer count (n_layers), so depths "
                              "cannot be normalised; rebuild the operators with `python -m runners regime`")
    return n


def compare_models(root: str | Path, probe: int = 64, probe_sizes=PROBE_SIZES, directions: int = 512,
                   seed: int = 0, say=lambda label: None) -> dict[str, pd.DataFrame]:
    """Every model folder below ``root`` analysed by normalised depth (see the module docstring).

    ``probe`` is the probe size the depth profile uses, capped at the narrowest model's width (the
    ``probe`` column says what was used); it joins the nested ``probe_sizes`` of the sensitivity
    analysis (sizes above a model's width are left out); ``directions`` random unit directions of S
    give the mechanism composition.
    """
    folders = model_folders(root)
    if not folders:
        raise RoutestatsError(f"{root}: no model folder with {S.OPERATOR_DIR}/{S.OPERATOR_INDEX} below it")
    loaded = [(folder, _layer_count(folder), load_operator_points(folder)) for folder in folders]
    probe = min([probe] + [int(pts[0].operators.J_T.shape[0]) for _, _, pts in loaded])
    probe_sizes = sorted(set(probe_sizes) | {probe})
    models, points, mechs, sweeps = [], [], [], []
    for folder, n_layers, pts in loaded:
        d = int(pts[0].operators.J_T.shape[0])
        models.append({"model": folder.name, "model_kind": pts[0].meta.get("model_kind"), "n_layers": n_layers,
                       "d": d, "points": len(pts), "examples": len({p.example for p in pts})})
        for pt in pts:
            if not 0 <= pt.layer < n_layers:
                raise RoutestatsError(f"{pt.source}: layer {pt.layer} outside the model's {n_layers} layers")
            if pt.operators.J_T.shape != (d, d):  # one model, one width: a point of another width is not this model's
                raise RoutestatsError(f"{pt.source}: operators of shape {pt.operators.J_T.shape}, but the model's "
                                      f"other points are {d} x {d}")
            say(f"compare: {folder.name} layer {pt.layer}, example {pt.example}")
            ops = pt.operators
            cert = certify(ops)
            sw = probe_sweep(ops, sizes=probe_sizes, seed=seed)
            at = sw[sw["probe"] == probe].iloc[0]
            depth = pt.layer / (n_layers - 1) if n_layers > 1 else 0.0
            errors = pt.meta.get("errors", {})
            key = {"model": folder.name, "layer": pt.layer, "depth": depth, "example": pt.example, "token": pt.token}
            points.append({**key, "d": d, "dim_S": cert.dim_S, "lambda_max": cert.lambda_max, "d_sw": cert.d_sw,
                           "normalised_d_sw": cert.d_sw / cert.dim_S if cert.dim_S else np.nan, "probe": probe,
                           "probe_lambda_max": at["lambda_max"], "probe_d_sw": int(at["d_sw"]),
                           "probe_normalised_d_sw": at["normalised_d_sw"],
                           "max_error": max([v for k, v in errors.items() if k.startswith("J_")] or [np.nan]),
                           "own_jacobian_error": errors.get("own_jacobian", np.nan)})
            sweeps.append(sw.assign(**key))
            if cert.dim_S:
                m = mechanism_composition(ops, cert, n=directions, seed=seed + 1)
                mechs.append(m[m["regime"].isin(list("QKEJ"))].assign(**key))
    pts = pd.DataFrame(points)
    g = pts.assign(switches=pts["probe_lambda_max"] > 1).groupby(["model", "layer", "depth"], sort=True)
    by_depth = g.agg(points=("example", "size"), probe=("probe", "first"), switching=("switches", "sum"),
                     lambda_max=("probe_lambda_max", "median"), lambda_max_min=("probe_lambda_max", "min"),
                     lambda_max_max=("probe_lambda_max", "max"), normalised_d_sw=("probe_normalised_d_sw", "median"),
                     normalised_d_sw_min=("probe_normalised_d_sw", "min"),
                     normalised_d_sw_max=("probe_normalised_d_sw", "max")).reset_index()
    sizes = (pd.concat(sweeps, ignore_index=True).groupby(["model", "probe"], sort=True)
             .agg(points=("layer", "size"), lambda_max=("lambda_max", "median"),
                  normalised_d_sw=("normalised_d_sw", "median")).reset_index())
    mech = (pd.concat(mechs, ignore_index=True).groupby(["model", "layer", "depth", "regime"], sort=True)
            ["share_of_switching"].median().rename("share").reset_index() if mechs
            else pd.DataFrame(columns=["model", "layer", "depth", "regime", "share"]))
    return {"models": pd.DataFrame(models), "points": pts, "by_depth": by_depth, "probe_sizes": sizes,
            "mechanisms": mech}
