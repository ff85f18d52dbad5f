"""A new routing metric is one definition and one registry entry (docs/architecture.md's worked
example): it then has paired inference, a pair-report section and a ``routestats table`` export.

The toy metric is the largest share of a query's attention on any one named field. Its expected
per-layer mean difference is computed here independently, in numpy, from the demo run's stored
full matrices (step 500) and its field ids: per example and head the mean over the example's named
queries of max_f (mass on field f's keys), then the mean over heads, then over examples.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import routestats as rs
from routestats.metrics.definitions import RoutingMetric, register, unregister
from routestats.rundir.synthetic import demo_run_dir

FAST = dict(resamples=200, permutations=200, length_resamples=50)


def max_field_share(red, field_ids, named, causal):
    return red["field_mass"].max(axis=-1)


@pytest.fixture
def toy():
    register(RoutingMetric("max_field", "max field share", "the largest share of a query's attention on one named "
                           "field", per_query=max_field_share))
    yield "max_field"
    unregister("max_field")


def independent(run, step=500) -> dict[int, dict[int, float]]:
    """example -> layer -> toy metric, from the stored matrices (numpy only)."""
    ex = run.examples(["example_id", "field_ids"]).set_index("example_id")["field_ids"]
    named = np.array(sorted(run.named_fields))
    out = {}
    for blk in run.iter_attention(step):
        g = np.asarray(ex[blk.example_id])
        onehot = (g[:, None] == named[None, :]).astype(np.float64)
        share = (blk.weights.astype(np.float64) @ onehot).max(axis=-1)  # (rows, n)
        valid = np.isin(g, named)
        per_row = share[:, valid].mean(axis=-1)
        out[blk.example_id] = {int(layer): float(per_row[blk.layer == layer].mean()) for layer in np.unique(blk.layer)}
    return out


def test_a_registered_metric_gets_paired_effects_a_section_and_a_table(toy):
    pair = rs.load_runs(demo_run_dir()).pairs()[0]
    eff = rs.paired_effects(pair, metric=toy, resamples=200, permutations=200)
    b, v = independent(pair.baseline), independent(pair.variant)
    for r in eff.itertuples():
        want = np.mean([v[e][r.layer] - b[e][r.layer] for e in b])
        assert r.mean_diff == pytest.approx(want, abs=1e-12)
    rep = rs.analyse(demo_run_dir(), **FAST)
    sec = rep.section(toy)
    assert sec.title == "Paired max field share effects" and sec.tables[0].name == "max_field_effects"
    assert np.allclose(rep.frame("max_field_effects")["mean_diff"], eff["mean_diff"], rtol=0, atol=1e-12)
    from routestats.cli import app

    res = CliRunner().invoke(app, ["table", "max_field_effects", str(demo_run_dir()), "--format", "csv",
                                   "--resamples", "200", "--permutations", "200"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].startswith("metric,layer,n")


def test_unknown_metric_and_name_clash_are_refused(toy):
    pair = rs.load_runs(demo_run_dir()).pairs()[0]
    with pytest.raises(rs.RoutestatsError, match="metric must be one of sfm, entropy"):
        rs.paired_effects(pair, metric="nope")
    with pytest.raises(rs.RoutestatsError, match="registered already"):
        register(RoutingMetric("max_field", "x", "y", per_query=max_field_share))
    with pytest.raises(rs.RoutestatsError, match="no per_query definition"):
        RoutingMetric("made_up", "x", "y")
