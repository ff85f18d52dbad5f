"""Root pytest configuration: without torch (the core's own install), the torch side is not collected
for doctests -- every ``runners`` module and the tests' tiny-model helper, by pattern, so a new runner
module cannot be forgotten -- and the tests that need torch skip themselves (``pytest.importorskip``)."""

import importlib.util

collect_ignore = ["runners/__main__.py", "setup.py"]
collect_ignore_glob = []
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("tokenizers") is None:
    collect_ignore_glob += ["runners/*.py", "tests/tiny_models.py"]
