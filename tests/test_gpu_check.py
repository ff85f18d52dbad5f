"""benchmarks/gpu_check.py: the dry run rehearses every part on CPU and says so; no CUDA -> exit 2."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gpu_check():
    return _load()


@pytest.fixture(scope="module")
def dry(gpu_check, tmp_path_factory):
    """One dry run (all four parts, bf16 autocast included) on one CPU thread."""
    old = torch.get_num_threads()
    out = tmp_path_factory.mktemp("gpu_check")
    with pytest.MonkeyPatch.context() as mp:  # the script sets defaults for these; keep them out of other tests
        mp.setenv("ROUTESTATS_CACHE", "off")
        mp.setenv("OMP_NUM_THREADS", "1")
        try:
            rc = gpu_check.main(["--out", str(out), "--dry-run", "--bf16", "--threads", "1"])
        finally:
            torch.set_num_threads(old)
    return rc, json.loads((out / "summary.json").read_text()), (out / "summary.md").read_text()


def _finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.slow  # the shared dry run takes ~9 s on one thread
def test_dry_run_is_labelled_and_never_claims_a_gpu(dry):
    rc, s, md = dry
    assert rc == 0
    assert s["device"] == "cpu (dry run)" and s["dry_run"] is True and s["gpu_measured"] is False
    assert "no GPU was measured" in s["note"]
    assert s["complete"] is True and _finite(s["wall_s"])
    assert "dry run" in md.lower() and "no GPU was measured" in md
    # goals are recorded with their CPU value but never judged in a dry run
    assert len(s["goals"]) == 3
    for g in s["goals"]:
        assert g["pass"] is None and "dry run" in g["note"] and _finite(g["measured"])


@pytest.mark.slow  # the shared dry run takes ~9 s on one thread
def test_parts_ran_within_budget_and_have_timings(dry):
    _, s, _ = dry
    assert set(s["parts"]) == {"overhead", "pair", "agreement", "capture"}
    for name, p in s["parts"].items():
        assert p["status"] == "ok" and p["cut_short"] is False, (name, p["notes"])
        assert _finite(p["wall_s"]) and 0 < p["wall_s"] <= p["budget_s"]
        assert p["units"] and all(u["status"] == "done" and _finite(u["wall_s"]) for u in p["units"])
    assert s["budgets_s"] == {"overhead": 15.0, "pair": 20.0, "agreement": 15.0, "capture": 25.0}
    assert all(c["pass"] is True for c in s["checks"]), [c for c in s["checks"] if not c["pass"]]


@pytest.mark.slow  # the shared dry run takes ~9 s on one thread
def test_overhead_rows_ratios_and_speedups(dry):
    _, s, _ = dry
    ov = s["parts"]["overhead"]
    assert ov["precisions"] == ["float32", "bf16-autocast"]
    assert ov["settings"]["lengths"] == [8, 16, 32] and ov["settings"]["allow_tf32"] is False
    # 2 precisions x 2 attention paths x 2 variants x 2 modes x 3 lengths
    assert len(ov["rows"]) == 48
    for r in ov["rows"]:
        assert _finite(r["mean_latency_ms"]) and r["mean_latency_ms"] > 0 and _finite(r["throughput_per_s"])
        assert r["peak_mb"] is None  # CPU: no CUDA memory statistics, nothing invented
        assert r["forward_flops"] > 0
    assert len(set(ov["trainable_parameters"].values())) == 1  # the SAAB path has no parameters
    assert len(ov["ratios"]) == 24 and len(ov["speedups"]) == 24
    for r in ov["ratios"]:
        assert math.isclose(r["saab_over_baseline"], r["saab_ms"] / r["baseline_ms"])
    for r in ov["speedups"]:
        assert math.isclose(r["fused_speedup"], r["explicit_ms"] / r["fused_ms"])
    assert all(t["matmul"] is False for t in ov["tf32_seen"].values())


@pytest.mark.slow  # the shared dry run takes ~9 s on one thread
def test_pair_checks_hold_on_cpu(dry):
    _, s, _ = dry
    p = s["parts"]["pair"]
    assert p["settings"]["preset"] == "smoke" and p["settings"]["steps"] == 6
    assert p["settings"]["checkpoint_steps"] == [1, 3, 6]
    checks = {c["name"]: c for c in s["checks"] if c["part"] == "pair"}
    assert checks["identical init, data order and masks across conditions"]["pass"] is True
    assert len({json.dumps(v, sort_keys=True) for v in p["pairing"].values()}) == 1
    # w_f = 0 equals the baseline within the stated tolerance (bitwise on CPU)
    tol = s["tolerances"]["wf0_vs_baseline"]
    assert tol == 1.2e-7
    assert p["wf0_vs_baseline"]["max"] <= tol and p["wf0_vs_baseline"]["bitwise"] is True
    assert set(p["wf0_vs_baseline"]["attention"]) == {"1", "3", "6"}
    assert "sfm" in p["wf0_vs_baseline"]["attention"]["6"]
    # SAAB really differs, so the comparison above is not vacuous
    assert checks["SAAB differs from the baseline (bias applied)"]["measured"] > 0
    # resume after a checkpoint reproduces the uninterrupted run bitwise on CPU
    r = p["resume_vs_uninterrupted"]
    assert r["bitwise"] is True and r["max"] == 0.0 and r["steps_equal"] is True
    assert checks["resume after a checkpoint reproduces the uninterrupted run"]["tolerance"] == 0.0
    # every run (the resumed one included) passes deep validation
    assert set(p["validation"]) == {"baseline", "saab", "saab-wf0", "saab (resumed)"}
    assert all(v["ok"] for v in p["validation"].values())
    assert set(p["median_step_seconds"]) == {"baseline", "saab", "saab-wf0"}
    assert all(_finite(v) and v > 0 for v in p["median_step_seconds"].values())


@pytest.mark.slow  # the shared dry run takes ~9 s on one thread
def test_agreement_is_cpu_vs_cpu_in_a_dry_run(dry):
    _, s, md = dry
    a = s["parts"]["agreement"]
    assert a["comparison"].startswith("cpu-vs-cpu") and "cpu-vs-cpu" in md
    assert a["mask_generator_equal"] is True
    for cond in ("baseline", "saab"):
        for impl in ("explicit", "fused"):
            assert a["init"][cond][impl]["attention"] == 0.0 and a["init"][cond][impl]["loss"] == 0.0
        assert a["trained"][cond]["bitwise"] is True and a["trained"][cond]["first_batch_equal"] is True
    for c in (c for c in s["checks"] if c["part"] == "agreement"):
        assert c["pass"] is True
        if _finite(c["measured"]):
            assert c["measured"] <= c["tolerance"]


def test_budget_overrun_is_reported_not_silent(gpu_check, tmp_path, monkeypatch):
    """A part whose budget runs out is cut short and says where; nothing is passed off as done."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    old = torch.get_num_threads()
    try:
        rc = gpu_check.main(["--out", str(tmp_path), "--dry-run", "--parts", "pair", "--budget", "pair=0.3",
                             "--threads", "1"])
    finally:
        torch.set_num_threads(old)
    s = json.loads((tmp_path / "summary.json").read_text())
    p = s["parts"]["pair"]
    assert rc == 0 and p["status"] == "cut short" and p["cut_short"] is True
    assert any("budget ran out" in n or "not started" in n for n in p["notes"])
    done = {u["name"] for u in p["units"] if u["status"] == "done"}
    assert not {"run saab-wf0", "resume: resumed SAAB run"} <= done  # 0.3 s cannot hold four smoke runs
    names = {c["name"] for c in s["checks"] if c["part"] == "pair"}
    # no check is claimed for runs that did not happen
    assert ("w_f = 0 equals the baseline" in names) == ("run saab-wf0" in done)
    assert "resume after a checkpoint reproduces the uninterrupted run" not in names
    assert "cut short" in (tmp_path / "summary.md").read_text()
    assert s["parts"]["pair"]["wall_s"] < 0.3 + gpu_check.GRACE_S


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_and_without_dry_run_exits_2_with_one_line(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=120, cwd=ROOT)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2
    assert len(lines) == 1 and "no CUDA device is present" in lines[0]
    assert not out.exists()  # nothing written: no summary that could be mistaken for a measurement


@pytest.mark.slow
def test_capture_part_compares_device_and_host_reductions(dry):
    _, s, md = dry
    c = s["parts"]["capture"]
    assert set(c["families"]) == {"bert", "llama", "mistral"}
    assert all(v["max_abs_diff"] <= 1e-5 for v in c["families"].values())  # the same weights and records
    # the long-context step (32k tokens of a 1B-class config on a GPU) runs at 1024 tokens of a tiny decoder dry
    long = c["long_context"]
    assert long["tokens"] == 1024 and long["attention"]["path"] == "chunked" and long["attention"]["probe"]["ok"]
    fused = c["long_context_fused"]  # issue [fused-capture]: the fused path at the same length
    assert fused["tokens"] == 1024 and fused["attention"]["path"] == "fused" and fused["attention"]["probe"]["ok"]
    assert "## Capture" in md
