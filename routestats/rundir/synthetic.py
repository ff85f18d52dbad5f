"""Bundled data locations and a clearly labelled SYNTHETIC run generator for tests and doctests.

:func:`synthetic_pair` writes a schema-valid baseline/SAAB pair whose attention is drawn
from random logits (not from any model). It exists so the analysis core can be tested and
documented without PyTorch; real runs come from ``python -m runners``.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> b, v = synthetic_pair(tempfile.mkdtemp(), seed=3, n_examples=3)
>>> load_run(v).manifest["notes"]
'SYNTHETIC: attention drawn from random logits by routestats.rundir.synthetic.synthetic_pair'
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from routestats.rundir.write import RunWriter

__all__ = ["synthetic_pair", "bundled_data_dir", "demo_run_dir"]

DBPEDIA_FIELDS = {"named": {"3": "content", "4": "title"}, "mask_id": 5, "vocab_size": 6}
THREE_FIELDS = {"named": {"3": "content", "4": "title", "6": "notes"}, "mask_id": 5, "vocab_size": 7}


def bundled_data_dir() -> Path:
    """The repository's ``data/`` folder (bundled corpora and the recorded demo run)."""
    return Path(__file__).resolve().parents[2] / "data"


def demo_run_dir() -> Path:
    """The recorded demo run tree under ``data/demo_run``."""
    return bundled_data_dir() / "demo_run"


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def synthetic_pair(
    out_dir, seed: int = 0, n_examples: int = 16, n_layers: int = 4, n_heads: int = 4,
    length_range: tuple[int, int] = (6, 24), same_field_bias: Sequence[float] = (0.5, 1.0, 1.0, 1.0),
    effect: Sequence[float] = (0.0, 0.3, -0.2, 1.0), steps: Sequence[int] = (100,), dtype: str = "float32",
    forms: Sequence[str] = ("matrices",), cap: int = 256, causal: bool = False, n_fields: int = 2,
    exact_null: bool = False, unnamed_examples: int = 0, examples_seed: int | None = None,
    noise_df: float | None = None, learned: Sequence[float] | None = None, noise_length: float | None = None,
) -> tuple[Path, Path]:
    """Write a SYNTHETIC paired run (``baseline`` and ``saab``) under ``out_dir``.

    Logits are standard normal per (example, layer, head, query, key) plus
    ``same_field_bias[l]`` on same-field pairs; the variant adds ``effect[l]`` on same-field
    pairs and small independent noise, so its SFM moves with the sign of ``effect``.
    Examples have a title (field 4) then content (field 3), each opened by a
    ``[FIELD_START]`` token carrying the field id; with ``n_fields=3`` the second half of the content
    is a third field, notes (6). Deterministic in ``seed`` (the same draws for 2 and 3 fields).

    With ``exact_null=True`` the baseline gets independent noise of the same size as the variant's, so
    the two runs are exchangeable and, with ``effect`` 0, the population mean difference of any metric is
    exactly 0 (without it, the variant's extra noise lowers SFM by about 1e-4 through Jensen's
    inequality), and the sign of every planted effect is the sign of the population Δ SFM.

    ``examples_seed`` draws the examples from a seed of their own: pairs of one ``examples_seed`` and other ``seed`` s
    evaluate the same examples with independent noise (seeds crossed with examples; r = 0 under an exact null).
    ``noise_df`` makes the per-example differences heavy-tailed: each run's extra noise of an example is scaled by
    sqrt(df / chi2(df)), drawn for each example and run (Student t's scale mixture: df 1 gives Cauchy-like tails),
    independently and identically for both runs under ``exact_null``, so the runs stay exchangeable and every
    planted sign is kept (SFM rises with the effect under any noise).
    ``noise_length``: each run's extra noise of an example scaled by (length / median length) ** noise_length (no
    draw), so under ``exact_null`` Δ's spread grows with length while its centre stays 0 (dependence, no association).
    ``learned`` (one value per layer) also writes ``saab-bias-off``, the variant's bias-off evaluation at the final
    step (factor ``eval_bias: off``, ``source_run`` the variant): its same-field logits carry ``learned[l]`` where the
    variant's carry ``effect[l]``, so the learned part (bias off - baseline) has the sign of ``learned[l]`` and the
    direct part (variant - bias off) the sign of ``effect[l] - learned[l]``; its own extra noise is drawn as the
    others' are (after them, so the pair's draws are unchanged).
    ``unnamed_examples`` makes the last that many examples wholly unnamed (field id 2, outside the run's
    named fields), so no query has a named position: their SFM is undefined (never silently 0).

    Returns
    -------
    (Path, Path)
        The baseline and variant run directories.
    """
    if len(same_field_bias) != n_layers or len(effect) != n_layers:
        raise ValueError("same_field_bias and effect need one value per layer")
    if learned is not None and len(learned) != n_layers:  # refused before anything is written
        raise ValueError("learned needs one value per layer")
    rng = np.random.default_rng(seed)
    rows = _synthetic_examples(rng if examples_seed is None else np.random.default_rng([examples_seed, 1 << 20]),
                               n_examples, length_range, cap, n_fields)
    for r in rows[len(rows) - unnamed_examples:] if unnamed_examples else []:
        r["field_ids"] = [2] * len(r["field_ids"])
    scale = _length_scale(rows, noise_length)
    noise, extra, extra_baseline = _logit_draws(rng, rows, len(steps), n_layers, n_heads, exact_null, noise_df, scale)
    ids = (hashlib.sha256(f"synthetic-init-{seed}".encode()).hexdigest(),
           hashlib.sha256(f"synthetic-order-{seed}".encode()).hexdigest(), seed)
    shape = (n_fields, causal, dtype, forms, n_layers, n_heads)
    paths = [_write_pair_run(Path(out_dir), variant, rng, rows, (noise, extra if variant == "saab" else extra_baseline),
                             ids, shape, steps, same_field_bias, effect if variant == "saab" else None)
             for variant in ("baseline", "saab")]
    if learned is not None:
        _write_bias_off(Path(out_dir), rng, rows, noise, ids, steps, learned, same_field_bias, shape, noise_df, scale)
    return paths[0], paths[1]


def _write_pair_run(out_dir: Path, variant: str, rng, rows, draws, ids, shape, steps, same_field_bias,
                    effect) -> Path:
    """One run of the pair: ``draws`` (the shared logits, this run's extra noise or None), ``effect`` (the
    variant's) or None."""
    noise, added = draws
    _, causal, dtype, forms, n_layers, n_heads = shape
    w = _writer(out_dir / variant, f"synthetic-{variant}-seed{ids[2]}", {"variant": variant}, ids, shape)
    w.write_examples(pd.DataFrame(rows))
    for si, step in enumerate(steps):
        with w.attention(step, dtype=dtype, forms=forms) as sink:
            for ex in rows:
                e = ex["example_id"]
                sink.add(e, _planted_attention(ex["field_ids"], noise[e][si], same_field_bias, effect,
                                               None if added is None else added[e][si], causal))
    _write_training_tables(w, rng, max(steps), n_layers)
    return w.finalize(notes="SYNTHETIC: attention drawn from random logits by "
                            "routestats.rundir.synthetic.synthetic_pair", model={"n_layers": n_layers, "n_heads": n_heads})


def _writer(path: Path, run_id: str, factors: dict, ids, shape) -> RunWriter:
    """A synthetic run's writer: ``ids`` (init id, data-order id, seed), ``shape`` (fields, causal, ...)."""
    return RunWriter(path, run_id=run_id, study="synthetic", factors=factors, seed=ids[2], init_id=ids[0],
                     data_order_id=ids[1], fields=DBPEDIA_FIELDS if shape[0] == 2 else THREE_FIELDS, overwrite=True,
                     causal=shape[1])


def _length_scale(rows, noise_length: float | None) -> dict:
    """Each example's factor on the extra noise: (prepared length / median length) ** ``noise_length`` (1 without)."""
    lengths = {r["example_id"]: float(r["prepared_length"]) for r in rows}
    if not noise_length:
        return {e: 1.0 for e in lengths}
    mid = float(np.median(list(lengths.values())))
    return {e: (n / mid) ** float(noise_length) for e, n in lengths.items()}


def _write_bias_off(out_dir: Path, rng, rows, noise, ids, steps, learned, same_field_bias, shape, noise_df,
                    scale: dict) -> Path:
    """The variant's bias-off evaluation at the final step (:func:`synthetic_pair`'s ``learned``)."""
    seed = ids[2]
    _, causal, dtype, forms, n_layers, n_heads = shape
    last = len(steps) - 1
    w = _writer(out_dir / "saab-bias-off", f"synthetic-saab-seed{seed}-bias-off",
                {"variant": "saab_bias_off", "eval_bias": "off"}, ids, shape)
    w.write_examples(pd.DataFrame(rows))
    with w.attention(max(steps), dtype=dtype, forms=forms) as sink:
        for ex in rows:
            e = ex["example_id"]
            added = 0.1 * rng.standard_normal(noise[e][last].shape)
            if noise_df:
                added = added * np.sqrt(noise_df / rng.chisquare(noise_df))
            added = added * scale[e]
            sink.add(e, _planted_attention(ex["field_ids"], noise[e][last], same_field_bias, learned, added, causal))
    _write_training_tables(w, rng, max(steps), n_layers)
    return w.finalize(source_run=f"synthetic-saab-seed{seed}", notes="SYNTHETIC bias-off evaluation",
                      model={"n_layers": n_layers, "n_heads": n_heads},
                      evaluation={"kind": "bias-off", "source_run": f"synthetic-saab-seed{seed}", "step": max(steps)})


def _logit_draws(rng, rows, n_steps: int, n_layers: int, n_heads: int, exact_null: bool, noise_df=None,
                 scale: dict | None = None):
    """Per example: the standard-normal logits, the variant's extra noise and (``exact_null``) the baseline's;
    ``noise_df``: each example's extra noise of each run scaled by sqrt(df / chi2(df)); ``scale``: then by the
    example's factor (:func:`_length_scale`; no draw)."""
    noise = {ex["example_id"]: rng.standard_normal((n_steps, n_layers, n_heads, len(ex["field_ids"]),
                                                    len(ex["field_ids"]))) for ex in rows}
    extra = {ex["example_id"]: 0.1 * rng.standard_normal(noise[ex["example_id"]].shape) for ex in rows}
    extra_baseline = {ex["example_id"]: 0.1 * rng.standard_normal(noise[ex["example_id"]].shape) for ex in rows} \
        if exact_null else None
    if noise_df:  # drawn after the others, so that the normal case keeps its stream
        for draws in (extra, extra_baseline or {}):
            for e in draws:
                draws[e] = draws[e] * np.sqrt(noise_df / rng.chisquare(noise_df))
    for draws in (extra, extra_baseline or {}) if scale is not None else ():
        for e in draws:
            draws[e] = draws[e] * scale[e]
    return noise, extra, extra_baseline


def _planted_attention(field_ids, noise, same_field_bias, effect, added, causal: bool) -> np.ndarray:
    """Softmax of ``noise`` + the layer's same-field bias (+ ``effect``, for the variant) on same-field pairs,
    + ``added`` noise; causal rows see no later key."""
    g = np.asarray(field_ids)
    same = (g[:, None] == g[None, :]).astype(float)
    logits = noise + np.asarray(same_field_bias, float)[:, None, None, None] * same
    if effect is not None:
        logits = logits + np.asarray(effect, float)[:, None, None, None] * same
    if added is not None:
        logits = logits + added
    if causal:
        logits = np.where(np.tril(np.ones_like(same, bool)), logits, -np.inf)
    return _softmax(logits)


def _synthetic_example(rng, e: int, length_range, cap: int) -> dict:
    """One synthetic example row: a title (field 4) then content (field 3), each opened by a start token."""
    n = int(rng.integers(length_range[0], length_range[1] + 1))
    n_title = int(rng.integers(2, max(3, n // 3) + 1))
    tokens = ["[FIELD_START]"] + [f"t{k}" for k in range(n_title - 1)]
    tokens += ["[FIELD_START]"] + [f"c{k}" for k in range(n - n_title - 1)]
    words, wid, prev_start = [], -1, True
    for k in range(n):  # start tokens are their own group; words have 1-2 pieces
        is_start = k in (0, n_title)
        if is_start or prev_start or rng.random() < 0.7:
            wid += 1
        words.append(wid)
        prev_start = is_start
    kept = min(n, cap)  # a record longer than the cap is cut there (its prepared length stays n)
    return {"example_id": e, "split": "val", "source_index": e, "row_id": f"row_{e}", "label": "synthetic",
            "prepared_length": n, "cap": cap, "field_ids": ([4] * n_title + [3] * (n - n_title))[:kept],
            "tokens": tokens[:kept], "word_ids": words[:kept], "is_primary": True}


def _synthetic_examples(rng, n_examples: int, length_range, cap: int, n_fields: int) -> list[dict]:
    """The example rows of a synthetic pair (2 fields, or 3 with the second half of the content as notes)."""
    if n_fields not in (2, 3):
        raise ValueError("n_fields is 2 (title, content) or 3 (title, content, notes)")
    rows = [_synthetic_example(rng, e, length_range, cap) for e in range(n_examples)]
    return [_third_field(r) for r in rows] if n_fields == 3 else rows


def _third_field(row: dict) -> dict:
    """The second half of an example's content relabelled as a third field (6, notes), opened by a start token."""
    g = list(row["field_ids"])
    content = [i for i, f in enumerate(g) if f == 3]
    if len(content) < 4:
        return row
    at = content[len(content) // 2]
    tokens = list(row["tokens"])
    tokens[at] = "[FIELD_START]"
    return {**row, "field_ids": g[:at] + [6] * (len(g) - at), "tokens": tokens}


def _write_training_tables(w: RunWriter, rng, last_step: int, n_layers: int) -> None:
    """Synthetic metrics (loss 1/step) and Q/K/V gradient norms for steps 1..last_step."""
    w.write_metrics(pd.DataFrame([{"step": s, "phase": "train", "loss": 1.0 / s, "lr": 1e-4, "grad_norm": 1.0,
                                   "elapsed_seconds": float(s)} for s in range(1, last_step + 1)]))
    w.write_gradients(pd.DataFrame([{"step": s, "layer": layer, "component": c, "norm": float(1.0 + layer + rng.random())}
                                    for s in range(1, last_step + 1) for layer in range(n_layers) for c in "qkv"]))
