"""Planted-truth sweep of the report's sentences (issue [true-words]): exact nulls, and pairs with known
per-layer effects, through the whole pair report; the rate of any positive headline claim on exact nulls
and the share of direction clauses whose sign disagrees with the planted one.

``python benchmarks/bench_claims.py [N_NULL] [N_PLANTED]`` prints both, with the scenario ranges.
The truth: ``synthetic_pair(exact_null=True)`` makes the two runs exchangeable, so with effect 0 the
population Δ of every layer is exactly 0, and a planted effect's sign is the population Δ's sign.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POSITIVE = {"rose", "fell", "mixed", "differs_across_layers", "depends_on_length"}


def scenario(rng, planted: bool) -> dict:
    layers = int(rng.integers(2, 9))
    n = int(rng.choice([5, 6, 8, 12, 24, 48, 96]))
    effect = [0.0] * layers
    if planted:
        effect = [float(rng.choice([0.0, 0.0, 0.05, -0.05, 0.3, -0.3, 1.0])) for _ in range(layers)]
    return dict(n_examples=n, n_layers=layers, n_heads=2, same_field_bias=[0.5] * layers, effect=effect,
                length_range=(6, 30), exact_null=True)


def run(kw: dict, seed: int, root: Path):
    import routestats as rs
    from routestats.rundir.synthetic import synthetic_pair

    synthetic_pair(root, seed=seed, **kw)
    return rs.analyse(root, resamples=999, permutations=999, length_resamples=199, flow="off", seed=seed)


def main(n_null: int = 100, n_planted: int = 50) -> dict:
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    any_claim, kinds = 0, {}
    for i in range(n_null):
        rep = run(scenario(rng, False), 10_000 + i, Path(tempfile.mkdtemp()))
        said = {c.kind for c in rep.claims if c.holds and c.where == "headline"} & POSITIVE
        any_claim += bool(said)
        for k in said:
            kinds[k] = kinds.get(k, 0) + 1
    wrong_sign = clauses = 0
    for i in range(n_planted):
        kw = scenario(rng, True)
        rep = run(kw, 20_000 + i, Path(tempfile.mkdtemp()))
        lead = next(c for c in rep.claims if c.kind in ("rose", "fell", "mixed", "no_evidence"))
        ev = lead.evidence
        for layer, said in zip(ev["layer"], ev["asserted"]):
            if said in ("rose", "fell"):
                clauses += 1
                truth = np.sign(kw["effect"][int(layer)])
                wrong_sign += truth != (1 if said == "rose" else -1)
    out = {"nulls": n_null, "null_any_positive_rate": any_claim / max(n_null, 1), "null_kinds": kinds,
           "planted": n_planted, "direction_clauses": clauses, "wrong_or_null_sign": wrong_sign,
           "seconds": round(time.perf_counter() - t0, 1)}
    print(out)
    return out


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
