"""The report kinds: one package each, built by one skeleton.

``compose`` sits between :func:`routestats.analysis.analyse` and the papers' analyses
(:mod:`routestats.studies`, :mod:`routestats.regime`). Each report kind is a package holding its
context (what every section reads, computed once), its section functions (each returns its tables,
figures *and* the claims that rest on its frames), its methods text and its build:

* :mod:`routestats.compose.pair`: one baseline/variant pair (plus its bias-off evaluation);
* :mod:`routestats.compose.study`: a tree of seeds x conditions;
* :mod:`routestats.compose.run`: one run, descriptive;
* :mod:`routestats.compose.mofa`: mixtures of softmax and sigmoid heads;
* :mod:`routestats.compose.regime`: regime switching over stored operators.

:func:`routestats.compose.skeleton.build_report` is the one build loop (guarded sections, claims
collected from the sections, headline in rank order, provenance); :mod:`routestats.compose.claims`
holds the sentence helpers the kinds share.
"""
