"""MoFA runner (tiny GPTs with mixed heads) and the MoFA report, end to end on tiny settings."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import routestats as rs  # noqa: E402
from routestats.compose.mofa.build import build_mofa_report  # noqa: E402
from runners.training.mofa import GPTConfig, MoFAGPT, MoFATrain, blocks_of, encode, train_mofa_run  # noqa: E402
from runners.training.train import seed_everything  # noqa: E402
from runners.training.model import state_hash  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def test_all_ratios_start_identical_and_heads_behave():
    hashes = set()
    for k in range(5):
        seed_everything(3)
        hashes.add(state_hash(MoFAGPT(GPTConfig(n_ctx=16, n_layer=2, n_head=4, d_model=32, n_sigmoid=min(k, 4)))))
    assert len(hashes) == 1  # the head partition adds no parameters
    seed_everything(3)
    m = MoFAGPT(GPTConfig(n_ctx=16, n_layer=1, n_head=4, d_model=32, n_sigmoid=2)).eval()
    x = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        _, (p,) = m(x, need_probs=True)
    soft, sig = p[0, :2], p[0, 2:]
    assert torch.allclose(soft.sum(-1), torch.ones(2, 16), atol=1e-6)
    assert float(torch.triu(p[0], diagonal=1).abs().max()) == 0.0  # causal
    # sigmoid weights are sigma(s - log t_i): at query 0 (t = 1) the weight is sigma(s_00)
    assert float(sig[:, 0, 0].min()) > 0 and not torch.allclose(sig.sum(-1), torch.ones(2, 16))


def test_blocks_drop_the_remainder():
    ids = encode(["abc", "defg"])
    assert ids.tolist() == [97, 98, 99, 100, 101, 102, 103]
    assert blocks_of(ids, 3).tolist() == [[97, 98, 99], [100, 101, 102]]


def test_tiny_mofa_tree_reports(tmp_path):
    docs = {"prose": ["The quick brown fox jumps over the lazy dog. " * 20],
            "code": ["def f(x):\n    return x + 1\n" * 30], "numbers": ["1,2,3\n4,5,6\n" * 60]}
    train = ["Some training text about foxes and dogs. " * 60]
    cfg = dict(n_ctx=16, n_layer=2, n_head=2, d_model=16)
    for seed in (1, 2):
        for k in (0, 1, 2):
            train_mofa_run(tmp_path / f"s{seed}" / f"r{k}", cfg=GPTConfig(**cfg, n_sigmoid=k), train_text=train,
                           domains=docs, seed=seed, tc=MoFATrain(steps=4, batch_size=4, entropy_blocks=2))
    runs = rs.load_runs(tmp_path)
    assert len(runs) == 6
    for r in runs:
        r.validate(deep=True)
    assert len({r.init_id for r in runs if r.seed == 1}) == 1 and len({r.data_order_id for r in runs if r.seed == 1}) == 1
    rep = build_mofa_report(runs)
    assert rep.facts["ratios"] == ["2:0", "1:1", "0:2"]
    assert set(rep.frame("ranking")["domain"]) == {"prose", "code", "numbers"}
    # PPL of a run/domain is exp(total NLL / total tokens) of its lm_scores
    r0 = runs.select(seed=1, n_sigmoid=0).runs[0]
    sc = r0.lm_scores()
    want = np.exp(sc[sc.domain == "code"]["sum_nll"].sum() / sc[sc.domain == "code"]["n_tokens"].sum())
    ppl = rep.frame("ppl")
    got = ppl[(ppl.seed == 1) & (ppl.ratio == "2:0") & (ppl.domain == "code")]["ppl"].item()
    assert got == pytest.approx(want, rel=1e-12)
    assert set(rep.frame("entropy_type")["head_type"]) == {"softmax", "sigmoid"}
    assert set(rep.frame("consecutive")["head_type"]) == {"softmax", "sigmoid"}
    from typer.testing import CliRunner

    from routestats.cli import app

    out = tmp_path.parent / f"{tmp_path.name}-report"  # not inside the input tree
    res = CliRunner().invoke(app, ["report", str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "report.html").read_text()
    assert "Zero-shot perplexity by domain" in html and "PCA of the domain response" in html


def test_domain_block_scopes():
    from runners.training.mofa import domain_blocks

    docs = ["abcde", "fgh", "ijklmno"]
    assert domain_blocks(docs, 4).tolist() == [list(b"abcd"), list(b"efgh"), list(b"ijkl")]  # global: 15 -> 3 blocks
    # per batch of 2 documents: "abcdefgh" -> 2 blocks, "ijklmno" -> 1 block (remainders dropped per batch)
    assert domain_blocks(docs, 4, "per_batch:2").tolist() == [list(b"abcd"), list(b"efgh"), list(b"ijkl")]
    assert len(domain_blocks(docs, 4, "global", separator="newline")) == 4  # 17 bytes with two newlines
    with pytest.raises(ValueError, match="concat_scope"):
        domain_blocks(docs, 4, "per_doc")
