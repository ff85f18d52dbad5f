"""Initialisation probes: runner-side quantities (smoke preset) and the correlation analysis."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from routestats.studies.initprobe import initial_loss_summary, load_probe, probe_correlations, spearman_rho


def test_spearman_reference_values_and_ties():
    # METHODS 3.8 test values; ties get average ranks
    assert spearman_rho([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman_rho([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    x, y = [1, 1, 3, 4, 5], [2, 1, 4, 4, 9]
    assert spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert np.isnan(spearman_rho([1, 1, 1], [1, 2, 3]))


def synthetic_probe():
    rng = np.random.default_rng(0)
    seeds = [0, 7, 42, 99, 123]
    loss = [{"seed": s, "variant": v, "mask_seed": m, "block": b, "loss": 1.0 + rng.normal(0, 0.01) + (0.002 * s / 100 if v == "saab" else 0)}
            for s in seeds for v in ("baseline", "saab") for m in (101, 202) for b in range(3)]
    summ = pd.DataFrame([{"seed": s, "field_embedding_distance": rng.random(), "mask_embedding_offset": rng.random(),
                          "qkv_norm_ratio": 1 + rng.random(), "out_proj_norm_ratio": 1.0, "ffn_norm_ratio": rng.random()}
                         for s in seeds])
    upd = pd.DataFrame([{"seed": s, "variant": v, "grad_ratio": rng.random(), "update_ratio": rng.random()}
                        for s in seeds for v in ("baseline", "saab")])
    outcomes = pd.DataFrame({"seed": seeds, "displacement": rng.normal(size=5)})
    return {"initial_loss": pd.DataFrame(loss), "init_summaries": summ, "one_update": upd}, outcomes


def test_probe_correlations_by_hand():
    probe, outcomes = synthetic_probe()
    c = probe_correlations(probe, outcomes)
    y = outcomes.set_index("seed")["displacement"]
    loss = probe["initial_loss"].pivot_table(index=["seed", "mask_seed", "block"], columns="variant", values="loss")
    change = (loss["saab"] - loss["baseline"]).reset_index(name="d")
    overall = change.groupby("seed")["d"].mean()
    row = c[c.metric == "initial_loss_overall_mean"].iloc[0]
    assert row["spearman_rho"] == pytest.approx(stats.spearmanr(overall.loc[y.index], y).statistic, abs=1e-12)
    loso = c[c.metric == "initial_loss_leave_out_seed_42"].iloc[0]
    keep = [s for s in y.index if s != 42]
    assert loso["n_seeds"] == 4
    assert loso["spearman_rho"] == pytest.approx(stats.spearmanr(overall.loc[keep], y.loc[keep]).statistic, abs=1e-12)
    excl = change[change.block != 0].groupby("seed")["d"].mean()
    assert c[c.metric == "initial_loss_excluding_first_block"]["spearman_rho"].item() == pytest.approx(
        stats.spearmanr(excl.loc[y.index], y).statistic, abs=1e-12)
    # a constant summary has an undefined correlation
    assert np.isnan(c[c.metric == "out_proj_norm_ratio"]["spearman_rho"].item())
    bm = c[c.analysis == "initial_loss_block_mask"]
    assert len(bm) == 3 * 2  # blocks x masks, the correlations the reference never computed
    assert c.attrs["block_mask_range"] == (bm["spearman_rho"].min(), bm["spearman_rho"].max())
    s = initial_loss_summary(probe["initial_loss"])
    per_mask = change.groupby(["seed", "mask_seed"])["d"].mean()
    assert s.set_index("seed").loc[7, "sd_across_masks"] == pytest.approx(per_mask.loc[7].std(ddof=1), abs=1e-15)
    assert s.set_index("seed").loc[7, "mean"] == pytest.approx(overall.loc[7], abs=1e-15)


@pytest.mark.torch
def test_runner_probe_smoke(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    import torch

    from runners.training.data import resolve
    from runners.training.initprobe import run_init_probe
    from runners.training.presets import get_preset

    torch.set_num_threads(1)
    run_init_probe(tmp_path, data=resolve("bundled-dbpedia"), preset=get_preset("smoke"), seeds=[1, 2, 3],
                            mask_seeds=[101, 202], examples=8, blocks=2)
    probe = load_probe(tmp_path)  # also checks that baseline and SAAB hashes agree per seed
    assert len(probe["initial_loss"]) == 3 * 2 * 2 * 2  # seeds x variants x masks x blocks
    assert probe["layer_norms"]["layer"].nunique() == 2
    # identical initial tensors and dropout-free losses: the baselines' loss depends on the seed only
    l = probe["initial_loss"]
    again = run_init_probe(tmp_path / "again", data=resolve("bundled-dbpedia"), preset=get_preset("smoke"), seeds=[1],
                           mask_seeds=[101, 202], examples=8, blocks=2, one_update=False)["initial_loss"]
    pd.testing.assert_frame_equal(again, l[l.seed == 1].reset_index(drop=True))
    c = probe_correlations(probe, pd.DataFrame({"seed": [1, 2, 3], "displacement": [0.1, -0.2, 0.3]}))
    assert "gradient_ratio_change" in c["metric"].tolist()


@pytest.mark.torch
def test_init_probe_reports_every_phase_when_stderr_is_a_file(tmp_path):
    # was: silent for 12-50 s with its output going to a file (nohup, SLURM, `> log`)
    import os
    import re
    import subprocess
    import sys

    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    with open(tmp_path / "log", "w") as log:
        res = subprocess.run([sys.executable, "-m", "runners", "init-probe", "--preset", "smoke", "--seeds", "1,2",
                              "--mask-seeds", "101,202", "--examples", "8", "--blocks", "2", "--threads", "1",
                              "--out", str(tmp_path / "probe")], stdout=log, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "log").read_text().startswith("wrote init_summaries, initial_loss")
    lines = [m.groups() for m in re.finditer(r"^\[\s*([\d.]+) s\] (.+): (\d+)/(\d+)", res.stderr, re.M)]
    tasks = {name: {(int(done), int(total)) for t, n, done, total in lines if n == name} for _, name, _, _ in lines}
    phases = ["data: tokenizer and encoding"] + [f"seed {s}: {p}" for s in (1, 2)
                                                 for p in ("initial states", "initial losses", "one-update probe")]
    assert list(tasks) == phases, res.stderr  # in order, each announced as it starts and reported as it ends
    for name, seen in tasks.items():
        total = max(t for _, t in seen)
        assert (0, total) in seen and (total, total) in seen, (name, seen)
    assert tasks["seed 1: initial losses"] >= {(k, 8) for k in range(9)}  # 2 variants x 2 masks x 2 blocks, each
    times = [float(t) for t, *_ in lines]
    assert max(b - a for a, b in zip(times, times[1:])) <= 5.0, res.stderr
