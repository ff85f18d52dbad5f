"""Root pytest configuration: doctests of torch-dependent runner modules need torch."""

import importlib.util

collect_ignore = ["runners/__main__.py", "setup.py"]
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("tokenizers") is None:
    collect_ignore += ["runners/model.py", "runners/msm.py", "runners/train.py"]
