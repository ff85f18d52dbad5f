"""Root pytest configuration: without torch (the core's own install), the torch-side modules are not
collected for doctests -- every runners module that imports torch, and the tests' tiny-model helper --
and the tests that need torch skip themselves (``pytest.importorskip``)."""

import importlib.util

collect_ignore = ["runners/__main__.py", "setup.py"]
TORCH_MODULES = ["runners/capture.py", "runners/checkpoints.py", "runners/evaluate.py", "runners/gguf_llama.py",
                 "runners/initprobe.py", "runners/lengths.py", "runners/model.py", "runners/mofa.py", "runners/msm.py",
                 "runners/operators.py", "runners/overhead.py", "runners/pretrained.py", "runners/regime.py",
                 "runners/seam.py", "runners/threads.py", "runners/train.py", "tests/tiny_models.py"]
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("tokenizers") is None:
    collect_ignore += TORCH_MODULES
