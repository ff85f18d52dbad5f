"""The paired inference engine: percentile bootstrap, sign-flip test, Holm, d_z, paired t,
Spearman with bootstrap CI, stratified bootstrap; frozen results with ``.to_frame()``."""

from routestats.stats.inference import *  # noqa: F401,F403
from routestats.stats.inference import __all__ as _inference_all
from routestats.stats.spearman import *  # noqa: F401,F403
from routestats.stats.spearman import __all__ as _spearman_all
from routestats.stats.ttest import *  # noqa: F401,F403
from routestats.stats.ttest import __all__ as _ttest_all

__all__ = [*_inference_all, *_spearman_all, *_ttest_all]
