"""The paired inference engine: percentile bootstrap, sign-flip test, Holm, d_z, paired t,
Spearman with bootstrap CI, stratified bootstrap; frozen results with ``.to_frame()``."""

from routestats.stats.inference import *  # noqa: F401,F403
from routestats.stats.inference import __all__  # noqa: F401
