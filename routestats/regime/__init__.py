"""Regime switching: growth operators, directional growth, spectral certification, query-gating
geometry, regime maps, and the regime report, all on numpy operators (METHODS Part B)."""
