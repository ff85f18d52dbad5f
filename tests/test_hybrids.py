"""Hybrids (issue [every-model]): models with softmax attention in some layers and linear attention or
state-space blocks in the others (Qwen3-Next, Qwen 3.5, Jamba, Bamba, Zamba 2, Granite-MoE-Hybrid, Nemotron-H,
MiniMax, OLMo-Hybrid) are captured in their softmax layers, labelled by the model's own layer numbers.

The expected weights are the model's own ``output_attentions`` on everything its tokenizer returns (the model
loaded from its folder the way its docs load it, not the object capture switched to the seam): a hybrid returns
one matrix per softmax layer, and the stored layers equal them (bitwise where the capture's batch rounds as one
record does; to 1e-6 in any case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from routestats.errors import RoutestatsError  # noqa: E402
from runners.pretrained.capture import capture_runs  # noqa: E402
from runners.pretrained.load import load_model  # noqa: E402
from runners.pretrained.seam import Condition  # noqa: E402
from tests.any_model import SMALL, hybrid_pattern, sweep  # noqa: E402
from tests.test_any_model import RECORDS, TEXTS  # noqa: E402
from tests.test_families import CAP, own_encoding, stored  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]
HYBRIDS = ("qwen3_next", "qwen3_5_text", "jamba", "bamba", "zamba2", "granitemoehybrid", "nemotron_h", "minimax",
           "olmo_hybrid", "lfm3", "recurrent_gemma")


@pytest.fixture(scope="module")
def qwen3_next(tmp_path_factory):
    """A tiny Qwen3-Next saved as a folder a user would have: 4 layers, softmax attention in layers 1 and 3
    (gated delta-net linear attention in 0 and 2), a word-level fast tokenizer."""
    from tests.tiny_models import tokenizer, words_of

    warnings.filterwarnings("ignore")
    tok, ids = tokenizer(words_of(TEXTS), "plain")
    cfg = T.AutoConfig.for_model("qwen3_next")
    small = {k: v for k, v in SMALL.items() if k != "top_k"}  # a generation parameter: save_pretrained refuses it
    for k, v in {**small, "vocab_size": len(tok) + 8, "pad_token_id": ids["pad"], "bos_token_id": ids["bos"],
                 "eos_token_id": ids["eos"], "num_hidden_layers": 4,
                 "layer_types": ["linear_attention", "full_attention"] * 2}.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("qwen3next") / "model"
    T.AutoModel.from_config(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_hybrids_softmax_layers_are_its_own_attention_by_its_own_layer_numbers(qwen3_next, tmp_path):
    out = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-m", "runners", "capture", "--model", str(qwen3_next), "--records",
                          str(ROOT / "data" / "docstrings_dbpedia" / "val.csv"), "--out", str(out), "--limit", "3",
                          "--cap", str(CAP), "--bias", "1.0", "--forms", "reductions,matrices", "--threads", "1"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "a hybrid: attention matrices in layers 1, 3 only" in res.stderr
    cap = json.loads((out / "baseline" / "run.json").read_text())["evaluation"]["capture"]
    assert cap["layers_stored"] == [1, 3] and cap["no_attention_matrix"] == [0, 2]
    torch.set_num_threads(1)  # as the capture ran (--threads 1): the linear layers' sums in the same order
    own = T.AutoModel.from_pretrained(qwen3_next, attn_implementation="eager").eval()  # as its docs load it
    tok = T.AutoTokenizer.from_pretrained(qwen3_next)
    base = stored(out / "baseline")
    for i, r in enumerate(RECORDS[:3]):
        with torch.no_grad():
            att = own(**own_encoding(tok, True, *dict(r.fields).values()), output_attentions=True).attentions
        assert len(att) == 2  # one matrix per softmax layer: 1 and 3
        want = torch.stack([a[0] for a in att]).numpy()
        # bitwise on the machine this was written on; on an AVX2 machine the capture's batch of three records and
        # the model's one record alone round differently in float32 (record 2: up to 2e-8 in the values shown,
        # measured), so the stored matrices are checked to 1e-6, far below what tells one layer from another
        assert base[i].shape == want.shape, i
        np.testing.assert_allclose(base[i], want, rtol=0, atol=1e-6, err_msg=str(i))
    import routestats as rs

    rep = rs.analyse(out, resamples=200, permutations=200)
    assert rep.frame("effects")["layer"].tolist() == [1, 3]  # the model's own numbers
    methods = " ".join(rep.methods.split())
    assert "The model is a hybrid: layers 0 and 2 have no attention matrix" in methods, methods
    flow = next(s for s in rep.sections if s.id == "flow")
    assert "layers 0 and 2 of this hybrid have no attention matrix" in (flow.text or "") and \
        "rollout_effects" not in rep.tables()


def test_a_hybrids_layer_options_name_its_attention_layers(qwen3_next, tmp_path):
    loaded = load_model(qwen3_next)
    assert loaded.layers == (1, 3) and loaded.no_attention_matrix == [0, 2]
    for kw, says in (({"layers": (0,)}, "--layers 0: Qwen3NextModel has attention matrices in layers 1, 3 of 0-3"),
                     ({"conditions": [Condition("baseline"), Condition("ablate", ablate=((2, 0),))]},
                      "--ablate 2.0: Qwen3NextModel has attention matrices in layers 1, 3 of 0-3")):
        with pytest.raises(RoutestatsError, match=says.replace(".", r"\.")):
            capture_runs(loaded, RECORDS[:2], tmp_path / "x", cap=CAP, **kw)
    # --ablate takes the model's own layer numbers: zeroing layer 1's head 0 changes what layer 3 attends to
    # and leaves layer 1's own weights alone (keyed by the seam's call order instead, layer 3 would be ablated:
    # both stored layers unchanged)
    runs = capture_runs(loaded, RECORDS[:2], tmp_path / "ab", cap=CAP, forms=("matrices",), batch_size=1,
                        conditions=[Condition("baseline"), Condition("ablate", ablate=((1, 0),))])
    base, abl = stored(runs[0]), stored(runs[1])
    for i in base:
        assert np.array_equal(base[i][0], abl[i][0]) and not np.allclose(base[i][1], abl[i][1]), i


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_every_hybrid_type_is_captured_in_its_softmax_layers(model_type, tmp_path):
    from tests.test_any_model import check_capture

    warnings.filterwarnings("ignore")
    (o,) = list(sweep([model_type], texts=TEXTS))
    assert o.outcome == "captured" and o.loaded.attention_layers == (1,), (o.outcome, o.reason)
    check_capture(o, tmp_path / model_type)  # bitwise its own output_attentions; the bias as softmax(s + w same)


def test_the_sweeps_tiny_hybrids_have_a_softmax_layer():
    # two layers of a hybrid's full-size pattern (every 4th, 6th or 8th layer softmax) are both linear attention:
    # the tiny config puts the softmax layer second (read from the config's own pattern fields)
    cfg = T.AutoConfig.for_model("jamba")
    assert hybrid_pattern(cfg)["attn_layer_period"] == 2
    assert hybrid_pattern(T.AutoConfig.for_model("llama")) == {}
