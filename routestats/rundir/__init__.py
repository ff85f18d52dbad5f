"""The run directory: the contract (schema), reading and validating runs, writing them, the
per-query reductions, atomic file writes, reservoir sampling and synthetic runs for tests.

This is the layer the runners (and anyone writing runs from their own code) import; it knows
nothing about metrics, statistics or reports.
"""
