"""The one-pair report: every table, figure and sentence for a baseline and its variant.

:func:`build_pair_report` composes metrics, the inference engine and the training analyses
into a frozen :class:`routestats.report.Report`; ``report.tables()`` returns every table as a
DataFrame (the same frames the HTML and LaTeX outputs are rendered from).

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> from routestats.rundir.collection import pair
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, v = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=8)
>>> rep = build_pair_report(pair(load_run(b), load_run(v)), AnalysisSettings(resamples=200, permutations=200))
>>> sorted(rep.tables())[:4]
['adjusted', 'effects', 'entropy_effects', 'field_to_field']
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from routestats.rundir import schema as S
from routestats.studies.effects import paired_differences, paired_effects
from routestats.errors import RoutestatsError
from routestats.rundir.read import Run
from routestats.rundir.collection import RunPair
from routestats.metrics.routing import (
    field_to_field, head_sfm, layer_summary, mass_split, profile_distance, reduce_attention, resolve_example_sets,
    select_examples, trivial_default, word_attention,
)
from routestats.studies.lengths import length_adjusted_effects, length_association, length_bins, length_table
from routestats.studies.training import gradient_checkpoint_summary, gradient_ratios, trajectory
from routestats.report import Figure, Report, Section, Table
from routestats.stats.inference import paired_inference
from routestats.stats.profile import layer_contrasts, profile_distance_ci, profile_shape
from routestats.studies.headline import pair_headline
from routestats.studies.pair_layout import pair_findings, pair_methods, pair_tables
from routestats.settings import AnalysisSettings

__all__ = ["build_pair_report", "select_token_map_example", "WordMap"]


@dataclass(frozen=True)
class WordMap:
    """Word-level attention of one example: labels and (role, layer) -> matrix."""

    example_id: int
    words: list[str]
    word_fields: list[str]
    layers: tuple[int, ...]
    matrices: dict = field(repr=False)  # (role, layer) -> ndarray (U, U); role in baseline/variant/difference
    selection_rule: str = ""
    head_matrices: dict = field(default_factory=dict, repr=False)  # (role, layer, head) -> (U, U), every layer

    def explorer_frames(self) -> dict[str, pd.DataFrame]:
        """The interactive explorer's data: ``words`` (index, word, field) and ``attention`` (role,
        layer, head, query_index, key_index, weight) for baseline and variant, every layer and head."""
        words = pd.DataFrame({"index": range(len(self.words)), "word": self.words, "field": self.word_fields})
        keys = sorted(self.head_matrices)
        U = len(self.words)
        q, k = np.meshgrid(np.arange(U), np.arange(U), indexing="ij")
        att = pd.DataFrame({
            "role": np.repeat([r for r, _, _ in keys], U * U),
            "layer": np.repeat([layer for _, layer, _ in keys], U * U).astype(np.int64),
            "head": np.repeat([h for _, _, h in keys], U * U).astype(np.int64),
            "query_index": np.tile(q.ravel(), len(keys)), "key_index": np.tile(k.ravel(), len(keys)),
            "weight": np.concatenate([self.head_matrices[key].ravel() for key in keys]) if keys else [],
        })
        return {"words": words, "attention": att}

    def to_frame(self) -> pd.DataFrame:
        rows = []
        for (role, layer), m in self.matrices.items():
            for i, q in enumerate(self.words):
                for j, k in enumerate(self.words):
                    rows.append((self.example_id, role, layer, i, q, j, k, float(m[i, j])))
        return pd.DataFrame(rows, columns=["example_id", "role", "layer", "query_index", "query_word", "key_index",
                                           "key_word", "weight"])


def select_token_map_example(run: Run, min_length: int = 20, max_length: int = 30,
                             min_tokens_per_field: int = 4, examples=None) -> int | None:
    """The example for the word-level figure, chosen without any model output (METHODS 6.3).

    The lowest ``source_index`` among the evaluated examples whose token count lies in
    [min_length, max_length] and whose every named field has at least
    ``min_tokens_per_field`` tokens (field-start tokens count). The project's own runs name
    every token; in runs captured from other models unnamed tokens (special tokens,
    separators) are allowed (the map shows them greyed). None when no example qualifies.
    """
    ex = run.examples(["example_id", "source_index", "field_ids"])
    ids = select_examples(run, examples)
    if ids is not None:
        ex = ex[ex["example_id"].isin(ids)]
    named = run.field_ids
    for row in ex.sort_values("source_index").itertuples(index=False):
        g = np.asarray(row.field_ids)
        if not min_length <= len(g) <= max_length or not np.isin(g, named).any():
            continue
        if all((g == f).sum() >= min_tokens_per_field for f in named):
            return int(row.example_id)
    return None


def word_label(pieces) -> str:
    """A word from its tokenizer pieces, markers stripped (WordPiece ``##``, BPE ``Ġ``/``Ċ``, SentencePiece ``▁``).

    >>> word_label(["nu", "##mp", "##y"]), word_label(["Ġevenly"]), word_label(["[CLS]"])
    ('numpy', 'evenly', '[CLS]')
    """
    out = "".join(p[2:] if p.startswith("##") else p for p in pieces)
    out = out.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "⏎").strip()
    return out or "".join(pieces)


def _word_map(p: RunPair, settings: AnalysisSettings, step: int, n_layers: int) -> WordMap | None:
    ex_id = select_token_map_example(p.baseline, settings.token_map_min_length, settings.token_map_max_length,
                                     settings.token_map_min_tokens_per_field, settings.examples)
    rule = (f"lowest source_index with {settings.token_map_min_length}-{settings.token_map_max_length} valid tokens, "
            f">= {settings.token_map_min_tokens_per_field} tokens in every named field, all tokens named; "
            "chosen before looking at any attention")
    if ex_id is None:
        return None
    if S.FORM_MATRICES not in p.baseline.attention_forms(step) or S.FORM_MATRICES not in p.variant.attention_forms(step):
        return None
    cols = ["example_id", "length", "tokens", "word_ids", "field_ids"]  # converted from Arrow: only what is used
    row = p.baseline.examples(cols).set_index("example_id").loc[ex_id]
    word_ids = np.asarray(row["word_ids"]) if row["word_ids"] is not None else np.arange(row["length"])
    tokens = list(row["tokens"]) if row["tokens"] is not None else [str(i) for i in range(row["length"])]
    g = np.asarray(row["field_ids"])
    names = p.baseline.named_fields
    layers = settings.token_map_layers or tuple(range(max(0, n_layers - 2), n_layers))
    mats, per_head = {}, {}
    groups = None
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        (blk,) = list(run.iter_attention(step, examples=[ex_id]))
        for layer in layers:
            sel = blk.layer == layer
            A = blk.weights[sel].astype(np.float64).mean(axis=0)  # plain mean over heads
            W, groups = word_attention(A, word_ids)
            mats[(role, layer)] = W
        for r in range(len(blk.layer)):  # every layer and head, for the interactive explorer
            per_head[(role, int(blk.layer[r]), int(blk.head[r]))] = word_attention(
                blk.weights[r].astype(np.float64), word_ids)[0]
    for layer in layers:
        mats[("difference", layer)] = mats[("variant", layer)] - mats[("baseline", layer)]
    words, wfields = [], []
    for gid in groups:
        pos = np.flatnonzero(word_ids == gid)
        pieces = [tokens[i] for i in pos]
        fname = names.get(int(g[pos[0]]), "unnamed")
        words.append(f"[{fname}]" if pieces == ["[FIELD_START]"] else word_label(pieces))
        wfields.append(fname)
    return WordMap(ex_id, words, wfields, tuple(layers), mats, rule, per_head)


def _curves(p: RunPair) -> pd.DataFrame | None:
    frames = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        if not run.has(S.METRICS):
            return None
        m = run.metrics()[["step", "phase", "loss", "accuracy"]]
        m.insert(0, "role", role)
        frames.append(m)
    return pd.concat(frames, ignore_index=True)


def _performance(p: RunPair) -> pd.DataFrame:
    rows = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        row = {"role": role, "run_id": run.run_id, "steps": None, "final_train_loss": np.nan, "eval_loss": np.nan,
               "eval_accuracy": np.nan}
        if run.has(S.METRICS):
            m = run.metrics()
            tr = m[m["phase"] == "train"].sort_values("step")
            ev = m[m["phase"] == "eval"].sort_values("step")
            if len(tr):
                row["steps"] = int(tr["step"].iloc[-1])
                row["final_train_loss"] = float(tr["loss"].iloc[-1])
            if len(ev):
                row["eval_loss"] = float(ev["loss"].iloc[-1])
                row["eval_accuracy"] = float(ev["accuracy"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def _provenance(p: RunPair, settings: AnalysisSettings, step: int) -> dict:
    from routestats.rundir.write import software_versions

    runs = {}
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        m = run.manifest
        files = run.verified_files()  # the files this analysis read, each checked against run.json
        runs[role] = {
            "run_id": run.run_id, "path": str(run.path), "study": run.study, "seed": run.seed,
            "factors": run.factors, "init_id": run.init_id, "data_order_id": run.data_order_id,
            "created": m.get("created"), "git_commit": m.get("git_commit"), "software": m.get("software", {}),
            "dataset": (m.get("dataset") or {}).get("name"), "files": files, "notes": m.get("notes"),
        }
        if run.capture is not None:
            runs[role]["capture"] = run.capture
    return {
        "runs": runs,
        "analysis": {
            "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "step": step,
            "settings": asdict(settings),
            "software": software_versions(("statsmodels", "jinja2", "matplotlib")),
        },
    }


def _compute(p: RunPair, s: AnalysisSettings, say) -> dict:
    """Every frame and scalar of the pair report (``s`` with concrete example sets)."""
    step = p.baseline.final_step if s.step is None else s.step
    for run in (p.baseline, p.variant):
        if step not in run.attention_steps:
            raise RoutestatsError(f"no attention at step {step} in {run.run_id}; stored steps: {run.attention_steps}")
    kw = dict(resamples=s.resamples, permutations=s.permutations, seed=s.seed,
              mode=s.mode, confidence=s.confidence, examples=s.examples, step=step, trivial=s.trivial_queries)
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):  # most of a large report's time
        say(f"reading the {role}'s attention ({run.run_id}, step {step}, {len(run.examples(['example_id'])):,} examples)")
        reduce_attention(run, step, s.trivial_queries)
    say("layer summary")
    layers = layer_summary(p, step, s.examples, s.trivial_queries)
    n_layers = int(layers["layer"].nunique())
    say("paired effects")
    effects = paired_effects(p, keys=s.keys, **kw)
    entropy_effects = paired_effects(p, metric="entropy", **kw)
    try:
        adjusted, adjusted_skipped = paired_effects(p, adjusted=True, keys=s.keys, **kw), ""
    except RoutestatsError as exc:  # e.g. every example shows one field: the plain tables still stand
        adjusted, adjusted_skipped = None, f"Not computed: {exc}."
    say("field-to-field")
    f2f = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        t = field_to_field(run, step, s.missing_fields, s.examples, s.trivial_queries)
        t.insert(0, "role", role)
        f2f.append(t)
    f2f = pd.concat(f2f, ignore_index=True)
    keys = ["layer", "source", "destination", "source_name", "destination_name"]
    diff = f2f[f2f.role == "variant"].set_index(keys)["mass"] - f2f[f2f.role == "baseline"].set_index(keys)["mass"]
    diff = diff.reset_index()
    diff["role"] = "difference"
    f2f = pd.concat([f2f, diff], ignore_index=True)[["role", *keys, "mass"]]
    say("head-level SFM")
    hs = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        t = head_sfm(run, step, s.examples, s.trivial_queries)
        t.insert(0, "role", role)
        hs.append(t)
    hs = pd.concat(hs, ignore_index=True)
    hd = hs[hs.role == "variant"].set_index(["layer", "head"])["sfm"] - hs[hs.role == "baseline"].set_index(["layer", "head"])["sfm"]
    hd = hd.reset_index()
    hd["role"] = "difference"
    hs = pd.concat([hs[["role", "layer", "head", "sfm"]], hd], ignore_index=True)
    traj = None
    common = sorted(set(p.baseline.attention_steps) & set(p.variant.attention_steps))
    if len(common) > 1:
        say("trajectories")
        traj = trajectory(p, "sfm")
        traj = traj[["role", "step", "layer", "value", "n_examples"]].rename(columns={"value": "sfm"})
    grad_steps = grad_ck = None
    if p.baseline.has(S.GRADIENTS) and p.variant.has(S.GRADIENTS) and n_layers >= 2:
        say("gradient ratios")
        gs, gc = [], []
        for role, run in (("baseline", p.baseline), ("variant", p.variant)):
            r = gradient_ratios(run, window=s.gradient_window)
            r.insert(0, "role", role)
            gs.append(r)
            c = gradient_checkpoint_summary(run, common or None, s.gradient_window)
            if len(c):
                c.insert(0, "role", role)
                gc.append(c)
        grad_steps = pd.concat(gs, ignore_index=True)
        grad_ck = pd.concat(gc, ignore_index=True) if gc else None
    say("word-level map")
    wm = _word_map(p, s, step, n_layers)
    lengths = assoc = bins = length_examples = None
    ex = p.baseline.examples(["example_id", "split", "length", "cap"])
    ids = select_examples(p.baseline, s.length_examples)
    if ids is not None:
        ex = ex[ex["example_id"].isin(ids)]
    length_adj = None
    if ex["length"].nunique() >= 3 and len(ex) >= 8:
        say("length analyses")
        lengths = length_table(ex[["split", "length"]], cap=int(ex["cap"].max()))
        assoc = length_association(p, resamples=s.length_resamples, seed=s.seed, step=step, examples=s.length_examples)
        bins = length_bins(p, step=step, examples=s.length_examples)
        length_adj = length_adjusted_effects(p, resamples=s.resamples, seed=s.seed, confidence=s.confidence,
                                             step=step, examples=s.length_examples)
        length_examples = paired_differences(p, step=step, examples=s.length_examples,
                                             trivial=s.trivial_queries)[["example_id", "layer", "diff"]]
        length_examples = length_examples.merge(ex[["example_id", "length"]], on="example_id")
        length_examples = _running_mean(length_examples)
    paired_ids = select_examples(p.baseline, s.examples)
    n_examples = len(p.baseline.examples(["example_id"])) if paired_ids is None else len(paired_ids)
    n_length = len(ex)
    say("mass outside the named fields")
    masses = mass_split(p, step, s.examples, s.trivial_queries)
    say("profile shape")
    diffs = paired_differences(p, step=step, examples=s.examples, trivial=s.trivial_queries, keys=s.keys)
    D = diffs.pivot(index="example_id", columns="layer", values="diff").sort_index(axis=1)
    shape = contrasts = distance = None
    if D.shape[1] >= 2 and D.shape[0] >= 2:
        shape = profile_shape(D.to_numpy(), permutations=s.permutations, seed=s.seed)
        contrasts = layer_contrasts(D.to_numpy(), list(D.columns), resamples=s.resamples, permutations=s.permutations,
                                    seed=s.seed, mode=s.mode, confidence=s.confidence)
        distance = profile_distance_ci(D.to_numpy(), resamples=s.resamples, seed=s.seed, confidence=s.confidence)
    init_final = _init_vs_final(p, s, step, D) if len(common) > 1 else None
    norm_eff = rollout_eff = None
    flow_skipped = []
    have = all(S.FORM_MATRICES in r.attention_forms(step) for r in (p.baseline, p.variant))
    mb = sum(_size(r.path / S.attention_file(step, S.FORM_MATRICES)) for r in (p.baseline, p.variant)) / 1e6 \
        if have else 0.0
    if s.flow == "off":
        flow_skipped.append("Not computed (flow = off).")
    elif have and s.flow == "auto" and mb > s.flow_max_mb:
        flow_skipped.append(f"Not computed: the two runs' attention matrices at step {step} are {mb:,.0f} MB, read "
                            f"whole for these measures (more than flow_max_mb = {s.flow_max_mb}); pass --flow on.")
    elif have:
        say("rollout and norm-weighted attention")
        rollout_eff = paired_effects(p, weighting="rollout", **kw)
        try:
            norm_eff = paired_effects(p, weighting="norm", **kw)
        except RoutestatsError as exc:
            if "value norms" not in str(exc):
                raise
            flow_skipped.append("Norm-weighted attention needs the transported-vector norms, which these runs "
                                "do not store (runs written before schema 1.1 or by a writer without value_norms).")
    else:
        flow_skipped.append(f"Rollout and norm-weighted attention need full attention matrices; step {step} stores "
                            "per-query reductions only.")
    return {
        "baseline_id": p.baseline.run_id, "variant_id": p.variant.run_id, "step": step, "n_examples": n_examples,
        "n_layers": n_layers, "n_heads": int(hs["head"].nunique()), "field_names": p.baseline.named_fields,
        "performance": _performance(p), "curves": _curves(p),
        "profile_distance": profile_distance(
            layers[layers.role == "baseline"].sort_values("layer")["sfm"].to_numpy(),
            layers[layers.role == "variant"].sort_values("layer")["sfm"].to_numpy()),
        "layers": layers.drop(columns=["run_id"]), "effects": effects, "entropy_effects": entropy_effects,
        "adjusted": adjusted, "adjusted_skipped": adjusted_skipped, "field_to_field": f2f, "head_sfm": hs, "trajectory": traj,
        "gradient_steps": grad_steps, "gradients": grad_ck, "word_map": wm, "lengths": lengths,
        "length_examples": length_examples, "length_association": assoc, "length_bins": bins,
        "length_adjusted": length_adj, "n_length_examples": n_length,
        "masses": masses, "causal": p.baseline.causal, "pretrained": p.baseline.pretrained and p.variant.pretrained,
        "trivial": trivial_default(p.baseline, s.trivial_queries),
        "capture": p.baseline.capture, "capture_variant": p.variant.capture,
        "profile_shape": shape, "layer_contrasts": contrasts, "profile_distance_ci": distance,
        "init_vs_final": init_final, "norm_effects": norm_eff, "rollout_effects": rollout_eff,
        "flow_skipped": " ".join(flow_skipped), "example_pairs": diffs[["example_id", "layer", "baseline", "variant", "diff"]],
    }


def _init_vs_final(p: RunPair, s: AnalysisSettings, step: int, D: pd.DataFrame) -> pd.DataFrame | None:
    """Delta at the earliest stored step vs the final one, per example and layer (METHODS 3.4a)."""
    common = sorted(set(p.baseline.attention_steps) & set(p.variant.attention_steps))
    s0 = common[0]
    if s0 == step:
        return None
    d0 = paired_differences(p, step=s0, examples=s.examples, trivial=s.trivial_queries, keys=s.keys)
    D0 = d0.pivot(index="example_id", columns="layer", values="diff").sort_index(axis=1)
    if not (D0.index.equals(D.index) and D0.columns.equals(D.columns)):
        return None  # not the same examples at both steps
    res = paired_inference((D - D0).to_numpy(), resamples=s.resamples, permutations=s.permutations, seed=s.seed,
                           mode=s.mode, confidence=s.confidence, labels=list(D.columns)).to_frame()
    res = res.rename(columns={"label": "layer", "p_adj": "p_holm"})
    res.insert(1, "step_init", s0)
    res.insert(2, "step_final", step)
    res.insert(3, "delta_init", D0.mean().to_numpy())
    res.insert(4, "delta_final", D.mean().to_numpy())
    res.insert(5, "share_at_init", res["delta_init"] / res["delta_final"])
    return res


def _running_mean(ex: pd.DataFrame) -> pd.DataFrame:
    """Per layer, the centred running mean of Δ over examples sorted by length (drawn in the length figure)."""
    window = max(5, ex["example_id"].nunique() // 20)
    parts = []
    for _, t in ex.groupby("layer", sort=True):
        t = t.sort_values(["length", "example_id"]).copy()
        # the running mean over examples sorted by length, one value per distinct length (many examples tied
        # at the cap would otherwise draw a vertical line there)
        rm = t["diff"].rolling(window, min_periods=1, center=True).mean()
        t["running_mean"] = rm.groupby(t["length"].to_numpy()).transform("mean").to_numpy()
        t["window"] = window
        parts.append(t)
    return pd.concat(parts, ignore_index=True)


def _size(path) -> int:
    """A file's size on disk, without hashing it (deciding whether to read the matrices must not cost a
    pass over them; the manifest's ``bytes`` is not validated, so it is not used). The file is verified
    when it is read."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _flow_section(rep: dict, tables: dict, fig) -> Section:
    """Weight, norm-weighted and rollout SFM side by side, each with the paired inference."""
    shown = tuple(tables[k] for k in ("norm_effects", "rollout_effects") if k in tables)
    if not shown:
        return Section("flow", "Routing beyond the weights: norm-weighted and rollout SFM",
                       skipped=rep["flow_skipped"] or "Not computed.")
    measures = {"weights": rep["effects"], "norm-weighted": rep["norm_effects"], "rollout": rep["rollout_effects"]}
    frame = pd.concat([f.assign(measure=m) for m, f in measures.items() if f is not None], ignore_index=True)
    text = ("Norm-weighted attention weighs each key by the norm of what the head transports from it, "
            "‖α_ij f(x_j)‖ (Kobayashi et al., 2020); rollout multiplies head-averaged attention, mixed half-and-half "
            "with the residual identity, across layers (Abnar & Zuidema, 2020). Rollout is a descriptive flow "
            "measure: it assumes the residual and attention paths contribute equally and ignores the MLPs.")
    if rep["flow_skipped"]:
        text += " " + rep["flow_skipped"]
    return Section("flow", "Routing beyond the weights: norm-weighted and rollout SFM", shown,
                   (fig("flow", "flow_measures", effects=frame),), text=text)


def build_pair_report(p: RunPair, settings: AnalysisSettings | None = None,
                      progress: Callable[[str], None] | None = None, within_study: bool = False) -> Report:
    """Compute every table, figure and sentence of the one-pair report.

    ``progress`` (optional) is called with a short label before each stage; ``within_study``
    marks a part of a study report (its headline then points at the across-seed results).
    """
    s = resolve_example_sets(settings or AnalysisSettings(), p.baseline)
    say = progress or (lambda label: None)
    rep = _compute(p, s, say)
    tables = pair_tables(rep, s)
    labels = {"baseline": f"baseline ({rep['baseline_id']})", "variant": f"variant ({rep['variant_id']})",
              "difference": "variant − baseline"}
    fig = lambda name, kind, **frames: Figure(name, kind, frames, {"labels": labels})  # noqa: E731
    data = lambda name: Table(name, rep[name])  # noqa: E731  (exported as CSV, drawn as a figure)
    m = rep["masses"]
    outside = float(np.nanmax(m["unnamed_mass"].to_numpy())) if len(m) else 0.0
    if rep["pretrained"]:
        perf = Section("performance", "Task performance", skipped="Pretrained models evaluated as they are: this "
                       "analysis trained nothing, so there is no training loss or task accuracy to show.")
    else:
        perf = Section("performance", "Task performance", (tables["performance"],),
                       (fig("training", "training_curves", curves=rep["curves"]),) if rep["curves"] is not None else ())
    if outside > 0.01 or rep["pretrained"]:
        mass = Section("masses", "Mass outside the named fields", (tables["masses"],),
                       (fig("masses", "mass_split", masses=m),),
                       text=f"Up to {100 * outside:.0f}% of a layer's attention lies on keys outside the named fields "
                            "(special tokens, separators, the first token); SFM counts none of it as same-field.")
    else:
        mass = Section("masses", "Mass outside the named fields", (Table("masses", m),),
                       skipped="All attention lies on named keys (U = 0 in every layer), so SFM over all keys and "
                               "over the named keys are the same.")
    sections = [
        perf,
        Section("profile", "Layer profile (paper Table 1)", (tables["layers"],),
                (fig("profile", "profile", layers=rep["layers"], effects=rep["effects"]),)),
        Section("effects", "Paired SFM effects (paper Table 2)", (tables["effects"],),
                (fig("paired_examples", "paired_dots", pairs=rep["example_pairs"]),),
                text="Each line is one example: its SFM in the baseline (left) and the variant (right); black: the "
                     "layer means."),
        Section("entropy", "Paired entropy effects", (tables["entropy_effects"],)),
        Section("adjusted", "Opportunity-adjusted SFM (paper Table 10)",
                (tables["adjusted"],) if rep["adjusted"] is not None else (), skipped=rep["adjusted_skipped"]),
        Section("fields", "Field-to-field attention", (data("field_to_field"),),
                (fig("field_to_field", "field_heatmaps", field_to_field=rep["field_to_field"]),),
                text="Mean attention mass from queries of the source field (rows) to keys of the destination field "
                     "(columns), per layer; the difference panel is variant − baseline."),
        mass,
        *([Section("shape", "Does the change differ across layers?",
                   (tables["profile_shape"], tables["layer_contrasts"], tables["profile_distance"]))]
          if "profile_shape" in tables else []),
        _flow_section(rep, tables, fig),
        *([Section("init_vs_final", "Learned vs mechanical: the difference at the start of training",
                   (tables["init_vs_final"],))] if "init_vs_final" in tables else []),
        Section("heads", "Head-level SFM", (data("head_sfm"),), (fig("head_sfm", "head_heatmaps", head_sfm=rep["head_sfm"]),),
                text="SFM of each head averaged over examples; a layer's SFM is the mean of its heads."),
    ]
    if rep["trajectory"] is not None:
        sections.append(Section("trajectories", "Trajectories over training", (data("trajectory"),),
                                (fig("trajectories", "trajectories", trajectory=rep["trajectory"]),),
                                text="Layer SFM at every stored checkpoint step."))
    if rep["gradient_steps"] is not None:
        sections.append(Section("gradients", "Gradient-norm ratio",
                                (tables["gradients"],) if rep["gradients"] is not None else (),
                                (fig("gradients", "gradient_ratios", steps=rep["gradient_steps"]),)))
    if rep["lengths"] is not None:
        sections.append(Section("lengths", "Lengths (paper Tables 11 and 12A)",
                                (tables["lengths"], tables["length_association"], tables["length_adjusted"],
                                 tables["length_bins"]),
                                (fig("lengths", "lengths", examples=rep["length_examples"]),)))
    wm = rep["word_map"]
    if wm is not None:
        sections.append(Section("words", f"Word-level attention, example {wm.example_id}",
                                (Table("word_map", wm.to_frame()),),
                                (Figure("explorer", "attention_explorer", wm.explorer_frames(),
                                        {"example_id": wm.example_id, "labels": labels}),
                                 fig("word_map", "word_map", word_map=wm)),
                                text="Attention grouped into words (average over query pieces, sum over key pieces). "
                                     "Explorer (HTML only): click a word to see where it attends, per layer and head "
                                     "or their mean, in the baseline, the variant or their difference; fields are "
                                     "underlined in colour. The static map below shows the head mean of layers "
                                     f"{', '.join(map(str, wm.layers))}; white/black lines mark field boundaries. "
                                     "Example selection: "
                                     f"{wm.selection_rule}."))
    else:
        sections.append(Section("words", "Word-level attention",
                                skipped="No evaluated example meets the selection rule (or no full matrices are stored "
                                        "at this step), so no word-level map is shown."))
    facts = {k: rep[k] for k in ("baseline_id", "variant_id", "step", "n_examples", "n_layers", "n_heads",
                                 "profile_distance", "causal", "pretrained", "trivial")}
    facts["field_names"] = dict(rep["field_names"])
    return Report(
        title=f"{rep['variant_id']} vs {rep['baseline_id']}",
        subtitle=f"Baseline {rep['baseline_id']} · variant {rep['variant_id']} · "
                 f"{'pretrained, evaluated as it is' if rep['pretrained'] else 'step ' + str(rep['step'])} · "
                 f"{rep['n_examples']} examples · {rep['n_layers']} layers × {rep['n_heads']} heads",
        sections=tuple(sections),
        findings=tuple(pair_findings(rep, s)),
        headline=tuple(pair_headline(rep["effects"], rep["n_examples"], rep["profile_shape"], rep["layer_contrasts"],
                                     rep["init_vs_final"], rep["length_association"], within_study=within_study,
                                     length_adjusted=rep["length_adjusted"], pretrained=rep["pretrained"])),
        methods=pair_methods(rep, s),
        provenance=_provenance(p, s, rep["step"]),
        data={k: rep[k] for k in ("curves", "gradient_steps", "length_examples") if rep[k] is not None},
        facts=facts,
    )
