"""The analyses of the papers, composed from metrics and statistics: paired effects of one pair,
multi-seed study tables, trajectories and gradient ratios, length analyses, initialisation
probes, MoFA, and the builders that turn each into a :class:`routestats.report.Report`.

The multi-seed study tables are re-exported here (``from routestats import studies;
studies.seed_table(...)``).
"""

from routestats.studies.seeds import *  # noqa: F401,F403
from routestats.studies.seeds import __all__  # noqa: F401
