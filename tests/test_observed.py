"""Observational capture (issue [every-model]): models whose attention is outside transformers'
AttentionInterface (BLOOM and MPT with ALiBi, GPT-Neo, XGLM, Megatron-BERT, DeBERTa, DeBERTa-v2, MPNet) are
captured from the weights their own eager forward returns, and any intervention is refused in one line.

The expected weights are each model's own ``output_attentions`` on everything its tokenizer returns (a copy of
the model made before capture touched it, run the way its docs run it): the stored matrices equal them bitwise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from routestats.errors import RoutestatsError  # noqa: E402
from runners.pretrained.capture import capture_runs  # noqa: E402
from runners.pretrained.seam import Condition  # noqa: E402
from tests.any_model import sweep  # noqa: E402
from tests.test_any_model import RECORDS, TEXTS  # noqa: E402
from tests.test_families import CAP, own_encoding, stored  # noqa: E402

pytestmark = pytest.mark.torch
OBSERVED = ("bloom", "mpt", "gpt_neo", "xglm", "megatron-bert", "deberta", "deberta-v2", "mpnet")


@pytest.mark.parametrize("model_type", OBSERVED)
def test_attention_outside_the_interface_is_observed_bitwise_and_never_intervened_on(model_type, tmp_path):
    (o,) = list(sweep([model_type], texts=TEXTS))
    assert o.outcome == "captured" and o.loaded.observed, (o.outcome, o.reason)
    assert "does not route its attention through transformers' AttentionInterface" in o.loaded.observed
    (run,) = capture_runs(o.loaded, RECORDS, tmp_path / "runs", conditions=[Condition("baseline")], cap=CAP,
                          forms=("matrices",), batch_size=1)
    ev = json.loads((run / "run.json").read_text())["evaluation"]["capture"]
    assert ev["path"] == "observed" and "no intervention possible" in ev["delegates_to"]
    base = stored(run)
    for i, r in enumerate(RECORDS):
        title, content = dict(r.fields)["title"], dict(r.fields)["content"]
        with torch.no_grad():
            att = o.own(**own_encoding(o.loaded.tokenizer, o.loaded.causal, title, content),
                        output_attentions=True).attentions
        want = torch.stack([a[0] for a in att]).numpy()
        assert base[i].shape == want.shape and np.array_equal(base[i], want), f"{model_type}: example {i}"
    for cond in (Condition("bias", bias=1.0), Condition("ablate", ablate=((0, 1),))):
        with pytest.raises(RoutestatsError, match="captured by observation .*--bias and --ablate are refused") as e:
            capture_runs(o.loaded, RECORDS, tmp_path / f"x-{cond.name}", conditions=[Condition("baseline"), cond],
                         cap=CAP)
        assert "\n" not in str(e.value) and not (tmp_path / f"x-{cond.name}").exists()
    with pytest.raises(RoutestatsError, match="--attention fused: .*captured from its own eager weights"):
        capture_runs(o.loaded, RECORDS, tmp_path / "f", conditions=[Condition("baseline")], cap=CAP,
                     attention="fused")


def test_two_checkpoints_of_an_observed_model_compare_and_the_methods_say_observed(tmp_path):
    """--compare works on an observed model (no intervention is needed: the pair is two checkpoints), and the
    report's methods say the weights were observed, not intervened on."""
    import copy

    import routestats as rs
    from runners.pretrained.capture import capture_checkpoints

    (o,) = list(sweep(["bloom"], texts=TEXTS))
    other = copy.deepcopy(o.loaded)
    with torch.no_grad():
        for prm in other.model.parameters():
            prm.add_(0.05 * torch.randn_like(prm))
    capture_checkpoints(o.loaded, other, RECORDS * 3, tmp_path / "pair", reason="perturbed copy", cap=CAP)
    rep = rs.analyse(tmp_path / "pair", resamples=100, permutations=100)
    assert "Attention was observed from BloomModel" in rep.methods and "no intervention" in rep.methods
    assert "effects" in rep.tables()


def test_a_t5_encoder_model_save_loads_as_the_class_its_folder_names(tmp_path):
    """Issue [every-model]: a folder whose config names T5EncoderModel (how T5 text encoders ship) was loaded as the
    whole T5Model and refused ("You must specify exactly one of input_ids or inputs_embeds"); it is captured,
    bitwise its own attention on the tokenizer's full encoding."""
    import transformers as T

    from runners.pretrained.load import load_model
    from tests.tiny_models import tokenizer, words_of

    tok, ids = tokenizer(words_of(TEXTS), "plain")
    cfg = T.T5Config(vocab_size=len(tok) + 4, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                     pad_token_id=ids["pad"], decoder_start_token_id=ids["pad"])
    torch.manual_seed(0)
    T.T5EncoderModel(cfg).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    own = T.T5EncoderModel.from_pretrained(tmp_path / "model", attn_implementation="eager").eval()  # its docs' way
    loaded = load_model(tmp_path / "model")
    (run,) = capture_runs(loaded, RECORDS, tmp_path / "runs", conditions=[Condition("baseline")], cap=CAP,
                          forms=("matrices",), batch_size=1)
    base = stored(run)
    for i, r in enumerate(RECORDS):
        title, content = dict(r.fields)["title"], dict(r.fields)["content"]
        with torch.no_grad():
            att = own(**own_encoding(tok, loaded.causal, title, content), output_attentions=True).attentions
        assert np.array_equal(base[i], torch.stack([a[0] for a in att]).numpy()), i


@pytest.mark.parametrize("model_type", OBSERVED)
def test_an_observed_models_saved_folder_is_captured_as_a_new_user_would(model_type, tmp_path):
    """The issue's new-user check: each tiny model saved as a folder (config, weights, tokenizer) and loaded by
    capture's loader from it equals the model loaded from that folder the way its docs load it (AutoModel, eager
    attention), run on everything its tokenizer returns; --bias is refused in one line naming why. (The command
    line around the same loader: tests/test_capture.py, tests/test_hybrids.py.)"""
    import transformers as T

    from runners.pretrained.load import load_model

    (o,) = list(sweep([model_type], texts=TEXTS))
    folder = tmp_path / "model"
    cfg = o.own.config
    if hasattr(cfg, "top_k"):  # the sweep's expert count, read by save_pretrained as a generation parameter
        del cfg.top_k
    if getattr(cfg, "attention_types", None):  # GPT-Neo: its 24-layer pattern cut to the 2 layers it was built with
        cfg.attention_types = [[["global", "local"], 1]]
        cfg.attention_layers = ["global", "local"]
    o.own.save_pretrained(folder)
    o.loaded.tokenizer.save_pretrained(folder)
    loaded = load_model(folder)
    assert loaded.observed and type(loaded.model).__name__ == type(o.own).__name__
    (run,) = capture_runs(loaded, RECORDS, tmp_path / "runs", conditions=[Condition("baseline")], cap=CAP,
                          forms=("matrices",), batch_size=1)
    own = T.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tok = T.AutoTokenizer.from_pretrained(folder)
    base = stored(run)
    for i, r in enumerate(RECORDS):
        with torch.no_grad():
            att = own(**own_encoding(tok, loaded.causal, *dict(r.fields).values()), output_attentions=True).attentions
        assert np.array_equal(base[i], torch.stack([a[0] for a in att]).numpy()), (model_type, i)
    with pytest.raises(RoutestatsError, match="--bias and --ablate are refused") as e:
        capture_runs(loaded, RECORDS, tmp_path / "bias", conditions=[Condition("baseline"), Condition("bias", 1.0)],
                     cap=CAP)
    assert "\n" not in str(e.value)
