"""Pairs and trees of runs: :func:`pair` verifies an exact pair, :func:`load_runs` indexes a tree
from its manifests (never from folder names), :func:`describe` lists what a run or tree holds.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.synthetic import synthetic_pair
>>> from routestats.rundir.read import load_run
>>> base, var = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=4)
>>> p = pair(load_run(base), load_run(var))
>>> p.variant.factors["variant"]
'saab'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from routestats.errors import IncompleteRunError, PairingError, RunFormatError
from routestats.numbers import counted
from routestats.rundir import schema as S
from routestats.rundir.read import Run, load_run

__all__ = ["RunPair", "RunCollection", "pair", "load_runs", "describe"]


@dataclass(frozen=True)
class RunPair:
    """A baseline and a variant run verified to share init, data order and examples."""

    baseline: Run
    variant: Run

    @property
    def seed(self) -> int | None:
        return self.baseline.seed

    def swapped(self) -> "RunPair":
        """The same pair with roles exchanged (signs of every delta flip)."""
        return RunPair(self.variant, self.baseline)


def _content(run: Run) -> pd.DataFrame:
    """example_id and the content hash recomputed from each example's tokens and field ids (the
    stored ``content_sha256`` column is a claim; pairing compares what the runs evaluated)."""
    ex = run.examples(["example_id", "tokens", "field_ids", "content_sha256"])
    got = [S.content_hash(t, g) for t, g in zip(ex["tokens"], ex["field_ids"])]
    bad = np.flatnonzero(np.asarray(got, dtype=object) != ex["content_sha256"].to_numpy(dtype=object))
    if bad.size:
        raise RunFormatError(f"{run.path / S.EXAMPLES}: column 'content_sha256' of example_id "
                             f"{int(ex['example_id'].iloc[bad[0]])} does not match its tokens and field_ids")
    return pd.DataFrame({"example_id": ex["example_id"].to_numpy(), "content_sha256": got})


def pair(baseline: Run, variant: Run) -> RunPair:
    """Pair two runs after checking they were trained and evaluated as an exact pair.

    Refuses runs whose ``init_id`` or ``data_order_id`` differ, whose named fields differ,
    or whose evaluated examples differ (ids, order or content hashes recomputed from the tokens
    and field ids); the message says which.
    """
    a, b = baseline, variant
    for key in ("init_id", "data_order_id"):
        va, vb = getattr(a, key), getattr(b, key)
        if va != vb:
            raise PairingError(
                f"cannot pair {a.run_id} with {b.run_id}: {key} differs ({va[:16]} vs {vb[:16]})"
            )
    if a.named_fields != b.named_fields:
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: named fields differ ({a.named_fields} vs {b.named_fields})"
        )
    ea, eb = _content(a), _content(b)
    if len(ea) != len(eb):
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: evaluated example counts differ ({len(ea)} vs {len(eb)})"
        )
    ids_a, ids_b = ea["example_id"].to_numpy(), eb["example_id"].to_numpy()
    if not np.array_equal(ids_a, ids_b):
        i = int(np.flatnonzero(ids_a != ids_b)[0])
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: evaluated examples differ in id or order "
            f"(position {i}: example_id {ids_a[i]} vs {ids_b[i]})"
        )
    ha, hb = ea["content_sha256"].to_numpy(), eb["content_sha256"].to_numpy()
    if not np.array_equal(ha, hb):
        i = int(np.flatnonzero(ha != hb)[0])
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: example_id {ids_a[i]} has different content "
            f"(hash {ha[i][:12]} vs {hb[i][:12]})"
        )
    return RunPair(a, b)


@dataclass(frozen=True)
class RunCollection:
    """Runs found under a tree, with a tidy index built from their manifests.

    ``index`` columns: run_id, path, study, seed, init_id, data_order_id, then one column
    per factor (missing levels are NA).
    """

    runs: tuple[Run, ...]
    index: pd.DataFrame

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self):
        return iter(self.runs)

    @property
    def studies(self) -> list[str]:
        """The distinct ``study`` names of the runs, sorted."""
        return sorted({r.study for r in self.runs})

    def verified_files(self) -> dict[str, dict[str, str]]:
        """run_id -> {path: SHA-256} of every file verified so far (what an analysis read)."""
        return {r.run_id: r.verified_files() for r in self.runs}

    def get(self, run_id: str) -> Run:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise KeyError(run_id)

    def select(self, **levels) -> "RunCollection":
        """Runs whose factors (or seed/study) equal the given levels.

        >>> import tempfile
        >>> from routestats.rundir.synthetic import synthetic_pair
        >>> d = tempfile.mkdtemp()
        >>> _ = synthetic_pair(d, seed=1, n_examples=2)
        >>> len(load_runs(d).select(variant="saab"))
        1
        """
        mask = np.ones(len(self.index), dtype=bool)
        for k, v in levels.items():
            if k not in self.index.columns:
                raise KeyError(f"no factor {k!r}; known: {list(self.index.columns)}")
            mask &= (self.index[k] == v).fillna(False).to_numpy(dtype=bool)
        keep = np.flatnonzero(mask)
        return RunCollection(tuple(self.runs[i] for i in keep), self.index.iloc[keep].reset_index(drop=True))

    def pairs(self, factor: str = "variant", baseline: str = "baseline") -> list[RunPair]:
        """Pair every non-baseline run with the baseline run sharing its init and data order."""
        if factor not in self.index.columns:
            raise PairingError(f"no factor {factor!r} in these runs; known: {list(self.index.columns)}")
        out = []
        base = {}
        for r in self.runs:
            if r.factors.get(factor) == baseline:
                key = (r.init_id, r.data_order_id)
                if key in base:
                    raise PairingError(
                        f"two baseline runs share init and data order: {base[key].run_id}, {r.run_id}"
                    )
                base[key] = r
        for r in self.runs:
            if r.factors.get(factor) == baseline:
                continue
            b = base.get((r.init_id, r.data_order_id))
            if b is None:
                raise PairingError(f"run {r.run_id} has no {factor}={baseline} run with the same init and data order")
            out.append(pair(b, r))
        return out


def scan_runs(root: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The run folders under ``root`` (holding ``run.json``) and the incomplete ones (run files without it: still
    being written, or killed), in walk order; hidden folders are not entered."""
    from routestats.rundir.replace import walk_folders

    import stat

    def regular(p: Path) -> bool:  # a FIFO or device named run.json is no manifest: its run is not complete
        try:
            return stat.S_ISREG(os.lstat(p).st_mode)
        except OSError:
            return False

    complete, incomplete = [], []
    for dirpath, dirnames, filenames in walk_folders(Path(root)):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if S.MANIFEST in filenames and not regular(Path(dirpath) / S.MANIFEST):
            incomplete.append(str(dirpath))  # listed, never opened (a FIFO would block the reader)
            dirnames[:] = []
        elif S.MANIFEST in filenames:
            complete.append(str(dirpath))
            dirnames[:] = []  # a run's own subfolders hold no runs
        elif S.EXAMPLES in filenames or S.ATTENTION_DIR in dirnames:
            incomplete.append(str(dirpath))
            dirnames[:] = []
    return complete, incomplete


def load_runs(tree: str | os.PathLike, on_incomplete: str = "raise") -> RunCollection:
    """Find every run under ``tree`` (any depth) and index them by their manifests.

    Grouping comes from manifests only, never from directory names. Hidden folders (names starting
    with ".": partial captures and reports, old copies being replaced) are not searched, nor is a tree
    nested deeper than :data:`routestats.rundir.replace.MAX_DEPTH` (refused in one line). A directory that
    holds run files but no ``run.json`` is incomplete: ``on_incomplete="raise"`` (default) stops
    with their list, ``"skip"`` leaves them out.
    """
    root = Path(tree)
    if not root.is_dir():
        raise RunFormatError(f"{root}: not a directory")
    if on_incomplete not in ("raise", "skip"):
        raise ValueError("on_incomplete must be 'raise' or 'skip'")
    complete, incomplete = scan_runs(root)
    runs = [load_run(d) for d in complete]
    if incomplete and on_incomplete == "raise":
        raise IncompleteRunError(
            f"{counted(len(incomplete), 'incomplete run')} without {S.MANIFEST} under {root}: "
            + ", ".join(incomplete[:5])
            + (" ..." if len(incomplete) > 5 else "")
            + " (still training, or killed; --skip-incomplete leaves them out, in Python on_incomplete='skip')"
        )
    if not runs:
        raise RunFormatError(f"{root}: no runs found (no {S.MANIFEST} below it)")
    ids = [r.run_id for r in runs]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise RunFormatError(f"{root}: run_id repeated across directories: {sorted(dup)}")
    rows = []
    for r in runs:
        row = {
            "run_id": r.run_id,
            "path": str(r.path),
            "study": r.study,
            "seed": r.seed,
            "init_id": r.init_id,
            "data_order_id": r.data_order_id,
        }
        for k, v in r.factors.items():
            if k in row:
                raise RunFormatError(f"{r.path}: factor name {k!r} clashes with an index column")
            row[k] = v
        rows.append(row)
    index = pd.DataFrame(rows)
    index["seed"] = index["seed"].astype("Int64")
    return RunCollection(tuple(runs), index)


def describe(obj: "Run | RunCollection") -> tuple[str, pd.DataFrame]:
    """(title, frame): one row per run with its id, study, seed, factors (None or NaN where a run has no value),
    examples, steps, forms and whether it is a pretrained model's capture."""
    runs = [obj] if isinstance(obj, Run) else list(obj)
    rows = []
    for r in runs:
        rows.append({"run_id": r.run_id, "study": r.study, "seed": r.seed,
                     **{k: None if v is None else str(v) for k, v in r.factors.items()},
                     "examples": len(r.examples(["example_id"])), "steps": ",".join(map(str, r.attention_steps)),
                     "final forms": ",".join(r.attention_forms()) if r.attention_steps else "",
                     "init": r.init_id[:10], "pretrained": r.manifest.get("pretrained") is True})
    df = pd.DataFrame(rows)
    if len(df):  # seeds as given (an int, or None for a pretrained model), never floats with NaN
        df["seed"] = pd.Series([r.seed for r in runs], dtype=object)
    return counted(len(runs), "run"), df

