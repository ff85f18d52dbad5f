import numpy as np
import pandas as pd
import pytest

from routestats.runwriter import RunWriter

FIELDS = {"named": {"3": "content", "4": "title"}, "mask_id": 5, "vocab_size": 6}


def make_examples(field_lists, cap=256):
    rows = []
    for i, g in enumerate(field_lists):
        rows.append(
            {
                "example_id": i,
                "split": "val",
                "source_index": i,
                "prepared_length": len(g),
                "cap": cap,
                "field_ids": list(g),
                "tokens": [f"tok{i}_{k}" for k in range(len(g))],
                "is_primary": True,
            }
        )
    return pd.DataFrame(rows)


def write_run(path, attention_by_example, field_lists, *, run_id="r", variant="baseline", init_id="init",
              data_order_id="order", dtype="float32", forms=("matrices",), step=10, seed=0, head_types=None,
              fields=FIELDS, factors=None):
    """Write a run whose attention[example] has shape (layers, heads, n, n)."""
    w = RunWriter(path, run_id=run_id, study="test", factors=factors or {"variant": variant}, seed=seed,
                  init_id=init_id, data_order_id=data_order_id, fields=fields, overwrite=True)
    w.write_examples(make_examples(field_lists))
    with w.attention(step, dtype=dtype, forms=forms, group_size=2) as sink:
        for ex, a in enumerate(attention_by_example):
            sink.add(ex, a, head_types=head_types)
    return w.finalize()


def random_attention(rng, n_layers, n_heads, n):
    x = rng.standard_normal((n_layers, n_heads, n, n))
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch):
    """Tests compute metrics afresh unless a test opts into the on-disk cache."""
    monkeypatch.setenv("ROUTESTATS_CACHE", "off")
