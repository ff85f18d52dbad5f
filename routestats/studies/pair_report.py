"""Everything a report shows for one run pair, as tidy frames (the renderer computes nothing).

:func:`build_pair_report` composes metrics, the inference engine and the training analyses
into a frozen :class:`PairReport`; ``report.tables()`` returns every table as a DataFrame
(the same frames the HTML and LaTeX outputs are rendered from).

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run, pair
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, v = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=8)
>>> rep = build_pair_report(pair(load_run(b), load_run(v)), ReportSettings(resamples=200, permutations=200))
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
from routestats.rundir.read import Run, RunPair
from routestats.metrics.routing import field_to_field, head_sfm, layer_summary, profile_distance, select_examples, word_attention
from routestats.studies.lengths import length_association, length_bins, length_table
from routestats.studies.training import gradient_checkpoint_summary, gradient_ratios, trajectory

__all__ = ["ReportSettings", "PairReport", "build_pair_report", "select_token_map_example"]


@dataclass(frozen=True)
class ReportSettings:
    """Analysis settings of a report (all recorded in its provenance)."""

    resamples: int = 10_000
    permutations: int = 20_000
    seed: int = 1001
    mode: str = "shared"
    confidence: float = 0.95
    examples: str = "all"
    step: int | None = None
    missing_fields: str = "zero"
    gradient_window: int = 10
    token_map_min_length: int = 20
    token_map_max_length: int = 30
    token_map_min_tokens_per_field: int = 4
    token_map_layers: tuple[int, ...] | None = None  # default: the last two layers
    length_resamples: int = 2000  # bootstrap resamples of the Spearman length association


@dataclass(frozen=True)
class WordMap:
    """Word-level attention of one example: labels and (role, layer) -> matrix."""

    example_id: int
    words: list[str]
    word_fields: list[str]
    layers: tuple[int, ...]
    matrices: dict = field(repr=False)  # (role, layer) -> ndarray (U, U); role in baseline/variant/difference
    selection_rule: str = ""

    def to_frame(self) -> pd.DataFrame:
        rows = []
        for (role, layer), m in self.matrices.items():
            for i, q in enumerate(self.words):
                for j, k in enumerate(self.words):
                    rows.append((self.example_id, role, layer, i, q, j, k, float(m[i, j])))
        return pd.DataFrame(rows, columns=["example_id", "role", "layer", "query_index", "query_word", "key_index",
                                           "key_word", "weight"])


@dataclass(frozen=True)
class PairReport:
    """All tables of a one-pair report; see :meth:`tables` for names and columns."""

    title: str
    settings: ReportSettings
    baseline_id: str
    variant_id: str
    step: int
    n_examples: int
    n_layers: int
    n_heads: int
    field_names: dict
    performance: pd.DataFrame
    curves: pd.DataFrame | None
    profile_distance: float
    layers: pd.DataFrame
    effects: pd.DataFrame
    entropy_effects: pd.DataFrame
    adjusted: pd.DataFrame
    field_to_field: pd.DataFrame
    head_sfm: pd.DataFrame
    trajectory: pd.DataFrame | None
    gradient_steps: pd.DataFrame | None
    gradient_checkpoints: pd.DataFrame | None
    word_map: WordMap | None
    provenance: dict
    lengths: pd.DataFrame | None = None
    length_examples: pd.DataFrame | None = None  # example_id, length, layer, diff (for the length figure)
    length_association: pd.DataFrame | None = None
    length_bins: pd.DataFrame | None = None

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table of the report by name (None-valued sections are left out)."""
        out = {
            "performance": self.performance,
            "layers": self.layers,
            "effects": self.effects,
            "entropy_effects": self.entropy_effects,
            "adjusted": self.adjusted,
            "field_to_field": self.field_to_field,
            "head_sfm": self.head_sfm,
        }
        if self.trajectory is not None:
            out["trajectory"] = self.trajectory
        if self.gradient_checkpoints is not None:
            out["gradients"] = self.gradient_checkpoints
        if self.word_map is not None:
            out["word_map"] = self.word_map.to_frame()
        for name in ("lengths", "length_association", "length_bins"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def select_token_map_example(run: Run, min_length: int = 20, max_length: int = 30,
                             min_tokens_per_field: int = 4, examples=None) -> int | None:
    """The example for the word-level figure, chosen without any model output (METHODS 6.3).

    The lowest ``source_index`` among the evaluated examples whose valid-token count lies
    in [min_length, max_length], whose every named field has at least
    ``min_tokens_per_field`` tokens (field-start tokens count) and whose tokens are all
    named. None when no example qualifies.
    """
    ex = run.examples(["example_id", "source_index", "field_ids"])
    ids = select_examples(run, examples)
    if ids is not None:
        ex = ex[ex["example_id"].isin(ids)]
    named = run.field_ids
    for row in ex.sort_values("source_index").itertuples(index=False):
        g = np.asarray(row.field_ids)
        if not np.isin(g, named).all() or not min_length <= len(g) <= max_length:
            continue
        if all((g == f).sum() >= min_tokens_per_field for f in named):
            return int(row.example_id)
    return None


def _word_map(p: RunPair, settings: ReportSettings, step: int, n_layers: int) -> WordMap | None:
    ex_id = select_token_map_example(p.baseline, settings.token_map_min_length, settings.token_map_max_length,
                                     settings.token_map_min_tokens_per_field, settings.examples)
    rule = (f"lowest source_index with {settings.token_map_min_length}-{settings.token_map_max_length} valid tokens, "
            f">= {settings.token_map_min_tokens_per_field} tokens in every named field, all tokens named; "
            "chosen before looking at any attention")
    if ex_id is None:
        return None
    if S.FORM_MATRICES not in p.baseline.attention_forms(step) or S.FORM_MATRICES not in p.variant.attention_forms(step):
        return None
    row = p.baseline.examples().set_index("example_id").loc[ex_id]
    word_ids = np.asarray(row["word_ids"]) if row["word_ids"] is not None else np.arange(row["length"])
    tokens = list(row["tokens"]) if row["tokens"] is not None else [str(i) for i in range(row["length"])]
    g = np.asarray(row["field_ids"])
    names = p.baseline.named_fields
    layers = settings.token_map_layers or tuple(range(max(0, n_layers - 2), n_layers))
    mats = {}
    groups = None
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        (blk,) = list(run.iter_attention(step, examples=[ex_id]))
        for layer in layers:
            sel = blk.layer == layer
            A = blk.weights[sel].astype(np.float64).mean(axis=0)  # plain mean over heads
            W, groups = word_attention(A, word_ids)
            mats[(role, layer)] = W
    for layer in layers:
        mats[("difference", layer)] = mats[("variant", layer)] - mats[("baseline", layer)]
    words, wfields = [], []
    for gid in groups:
        pos = np.flatnonzero(word_ids == gid)
        pieces = [tokens[i] for i in pos]
        fname = names.get(int(g[pos[0]]), str(g[pos[0]]))
        words.append(f"[{fname}]" if pieces == ["[FIELD_START]"] else "".join(pieces))
        wfields.append(fname)
    return WordMap(ex_id, words, wfields, tuple(layers), mats, rule)


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


def _provenance(p: RunPair, settings: ReportSettings, step: int) -> dict:
    from routestats.rundir.write import software_versions

    runs = {}
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        m = run.manifest
        files = {e["path"]: e["sha256"] for e in m["files"]
                 if e["path"] in (S.EXAMPLES, *(S.attention_file(step, f) for f in run.attention_forms(step)))}
        runs[role] = {
            "run_id": run.run_id, "path": str(run.path), "study": run.study, "seed": run.seed,
            "factors": run.factors, "init_id": run.init_id, "data_order_id": run.data_order_id,
            "created": m.get("created"), "git_commit": m.get("git_commit"), "software": m.get("software", {}),
            "dataset": (m.get("dataset") or {}).get("name"), "files": files, "notes": m.get("notes"),
        }
    return {
        "runs": runs,
        "analysis": {
            "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "step": step,
            "settings": asdict(settings),
            "software": software_versions(("statsmodels", "jinja2", "matplotlib", "seaborn")),
        },
    }


def build_pair_report(p: RunPair, settings: ReportSettings = ReportSettings(),
                      progress: Callable[[str], None] | None = None) -> PairReport:
    """Compute every table of the one-pair report.

    ``progress`` (optional) is called with a short label before each stage.
    """
    say = progress or (lambda label: None)
    step = p.baseline.final_step if settings.step is None else settings.step
    for run in (p.baseline, p.variant):
        if step not in run.attention_steps:
            raise RoutestatsError(f"no attention at step {step} in {run.run_id}; stored steps: {run.attention_steps}")
    kw = dict(resamples=settings.resamples, permutations=settings.permutations, seed=settings.seed,
              mode=settings.mode, confidence=settings.confidence, examples=settings.examples, step=step)
    say("layer summary")
    layers = layer_summary(p, step, settings.examples)
    n_layers = int(layers["layer"].nunique())
    say("paired effects")
    effects = paired_effects(p, **kw)
    entropy_effects = paired_effects(p, metric="entropy", **kw)
    adjusted = paired_effects(p, adjusted=True, **kw)
    say("field-to-field")
    f2f = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        t = field_to_field(run, step, settings.missing_fields, settings.examples)
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
        t = head_sfm(run, step, settings.examples)
        t.insert(0, "role", role)
        hs.append(t)
    hs = pd.concat(hs, ignore_index=True)
    hd = hs[hs.role == "variant"].set_index(["layer", "head"])["sfm"] - hs[hs.role == "baseline"].set_index(["layer", "head"])["sfm"]
    hd = hd.reset_index()
    hd["role"] = "difference"
    hs = pd.concat([hs[["role", "layer", "head", "sfm"]], hd], ignore_index=True)
    n_heads = int(hs["head"].nunique())
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
            r = gradient_ratios(run, window=settings.gradient_window)
            r.insert(0, "role", role)
            gs.append(r)
            c = gradient_checkpoint_summary(run, common or None, settings.gradient_window)
            if len(c):
                c.insert(0, "role", role)
                gc.append(c)
        grad_steps = pd.concat(gs, ignore_index=True)
        grad_ck = pd.concat(gc, ignore_index=True) if gc else None
    say("word-level map")
    wm = _word_map(p, settings, step, n_layers)
    lengths = assoc = bins = length_examples = None
    ex = p.baseline.examples(["example_id", "split", "length", "cap"])
    ids_sel = select_examples(p.baseline, settings.examples)
    if ids_sel is not None:
        ex = ex[ex["example_id"].isin(ids_sel)]
    if ex["length"].nunique() >= 3 and len(ex) >= 8:
        say("length analyses")
        lengths = length_table(ex[["split", "length"]], cap=int(ex["cap"].max()))
        assoc = length_association(p, resamples=settings.length_resamples, seed=settings.seed, step=step,
                                   examples=settings.examples)
        bins = length_bins(p, step=step, examples=settings.examples)
        length_examples = paired_differences(p, step=step, examples=settings.examples)[["example_id", "layer", "diff"]]
        length_examples = length_examples.merge(ex[["example_id", "length"]], on="example_id")
    ids = select_examples(p.baseline, settings.examples)
    n_examples = len(p.baseline.examples(["example_id"])) if ids is None else len(ids)
    return PairReport(
        title=f"{p.variant.run_id} vs {p.baseline.run_id}",
        settings=settings,
        baseline_id=p.baseline.run_id,
        variant_id=p.variant.run_id,
        step=step,
        n_examples=n_examples,
        n_layers=n_layers,
        n_heads=n_heads,
        field_names=p.baseline.named_fields,
        performance=_performance(p),
        curves=_curves(p),
        profile_distance=profile_distance(
            layers[layers.role == "baseline"].sort_values("layer")["sfm"].to_numpy(),
            layers[layers.role == "variant"].sort_values("layer")["sfm"].to_numpy(),
        ),
        layers=layers.drop(columns=["run_id"]),
        effects=effects,
        entropy_effects=entropy_effects,
        adjusted=adjusted,
        field_to_field=f2f,
        head_sfm=hs,
        trajectory=traj,
        gradient_steps=grad_steps,
        gradient_checkpoints=grad_ck,
        word_map=wm,
        provenance=_provenance(p, settings, step),
        lengths=lengths,
        length_examples=length_examples,
        length_association=assoc,
        length_bins=bins,
    )
