"""The names of the tables each kind of report writes (``OUT/tables/<name>.csv``), for
``routestats table --help`` and ``Report.table``'s error message. Import-free, so the CLI's help
stays fast; ``tests/test_table_names.py`` checks that every table a built report holds is listed.
Which of them a given report holds depends on its input (e.g. ``sweep`` needs several w_f values).
"""

REPORT_TABLES = {
    "pair": ("performance", "layers", "highest_layer", "effects", "entropy_effects", "adjusted", "field_to_field", "masses",
             "norm_effects", "rollout_effects", "profile_shape", "layer_contrasts", "profile_distance", "init_vs_final",
             "head_sfm", "trajectory",
             "gradients", "lengths", "length_association", "length_adjusted", "length_bins", "word_map"),
    "study": ("deltas", "seeds", "sweep", "placement", "shuffled", "depth", "datasets", "across_seeds",
              "hierarchical", "variance_components", "shared_examples", "forest", "decomposition", "trajectories", "gradients",
              "standardisation", "standardisation_sensitivity", "corpus_lengths", "init_probe"),
    "run": ("layers", "highest_layer", "masses", "head_sfm", "field_to_field", "word_map"),
    "mofa": ("ppl", "ranking", "per_ratio", "worst_best", "in_domain", "pca", "consecutive", "entropy_type",
             "entropy_layer"),
    "regime": ("summary", "spectrum", "geometry", "agreement", "probes", "routing", "cost", "search", "sweep",
               "regimes", "adjacency", "mechanisms", "counterfactual"),
}


def table_help() -> str:
    """One line per report kind listing its table names."""
    return ("; ".join(f"{kind}: {', '.join(names)}" for kind, names in REPORT_TABLES.items())
            + "; and <metric>_effects for each metric registered in routestats.metrics.definitions")


def unknown_table(name: str, names) -> str:
    """The one-line error for a table name the report does not hold: the closest name first when one is
    close (a typo), else the names it holds.

    >>> unknown_table("efects", ["layers", "effects", "entropy_effects"])
    "unknown table 'efects'; did you mean 'effects'? (routestats table --help lists every table name)"
    >>> unknown_table("bogus", ["layers", "effects"])
    "unknown table 'bogus'; this report has: layers, effects"
    >>> unknown_table("norm_effects", ["layers", "effects", "entropy_effects"])[:63]
    "no table 'norm_effects' in this report: its input does not give"
    """
    import difflib

    names = list(names)
    if any(name in kind for kind in REPORT_TABLES.values()) or name.endswith("_effects") and "effects" in names:
        # a real table name this input does not give: never "did you mean" another table
        return (f"no table {name!r} in this report: its input does not give it (the report's skipped sections say "
                f"why); this report has: {', '.join(names) or 'none'}")
    close = difflib.get_close_matches(name, names, n=1) or difflib.get_close_matches(name.lower(), names, n=1)
    if close:
        return f"unknown table {name!r}; did you mean {close[0]!r}? (routestats table --help lists every table name)"
    return f"unknown table {name!r}; this report has: {', '.join(names) or 'none'}"
