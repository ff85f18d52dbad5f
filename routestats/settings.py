"""One settings type for every analysis, with the one set of defaults the CLI and the API share.

Examples
--------
>>> s = AnalysisSettings(resamples=500)
>>> s.resamples, s.permutations, s.seed
(500, 20000, 1001)
>>> AnalysisSettings(mode="bca")
Traceback (most recent call last):
...
routestats.errors.RoutestatsError: mode must be one of shared, numpy, python-random, got 'bca'
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from routestats.errors import RoutestatsError

__all__ = ["AnalysisSettings", "Resampling", "PatternRules", "MODES", "EXAMPLE_SETS", "MAX_RESAMPLES"]

MODES = ("shared", "numpy", "python-random")
MAX_RESAMPLES = 10_000_000
"""The most bootstrap resamples or sign-flip draws one procedure may ask for (beyond it a run of the
procedure would take days and its Monte-Carlo error is already far below any reported digit)."""


def _whole(v) -> bool:
    """A whole number (int or NumPy integer), not a bool."""
    return not isinstance(v, bool) and hasattr(v, "__index__")
EXAMPLE_SETS = ("protocol", "all", "primary", "length_sample", "test_sample")


@dataclass(frozen=True)
class Resampling:
    """The settings of every random procedure, passed as one object from :class:`AnalysisSettings`
    down to the statistics (the defaults live here and nowhere else).

    ``resamples`` (percentile bootstrap), ``permutations`` (sign-flip draws), ``seed``,
    ``confidence`` (of every interval), ``mode`` (``shared``, or a reference procedure: ``numpy``,
    ``python-random``), ``length_resamples`` (the Spearman bootstrap of the length analyses).

    >>> Resampling.of(None, seed=7, resamples=None).seed, Resampling().resamples
    (7, 10000)
    """

    resamples: int = 10_000
    permutations: int = 20_000
    seed: int = 1001
    confidence: float = 0.95
    mode: str = "shared"
    length_resamples: int = 2000

    def __post_init__(self):
        if self.mode not in MODES:
            raise RoutestatsError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("resamples", "permutations", "length_resamples"):
            v = getattr(self, name)
            if not _whole(v) or not 1 <= v <= MAX_RESAMPLES:
                raise RoutestatsError(f"{name} must be a whole number from 1 to {MAX_RESAMPLES:,}, got {v!r}")
        if not _whole(self.seed) or not 0 <= self.seed < 2**63:
            raise RoutestatsError(f"seed must be a whole number from 0 to 2^63 - 1, got {self.seed!r}")
        if not 0 < self.confidence < 1:
            raise RoutestatsError(f"confidence must lie in (0, 1), got {self.confidence}")

    @classmethod
    def of(cls, base: "Resampling | None" = None, **overrides) -> "Resampling":
        """``base`` (default: the defaults) with the overrides that are not None."""
        given = {k: v for k, v in overrides.items() if v is not None}
        return replace(base or cls(), **given) if given else (base or cls())


@dataclass(frozen=True)
class PatternRules:
    """Thresholds of the seed-table pattern labels (paper Table 3; first matching rule wins), in terms
    of the two top layers' SFM: Δ_lo, Δ_up (variant − baseline of the penultimate and last layer) and
    the gaps g = SFM_up − SFM_lo of the baseline (g_b) and the variant (g_v).

    1. ``L<up>-dominant change`` -- Δ_up >= ``min_change`` and Δ_up >= ``dominance_ratio`` x |Δ_lo|: the last
       layer's gain dominates, and is at least the magnitude floor (a gain of 0.0001 dominates nothing);
    2. ``Ordering reverses`` -- g_b >= -tol and g_v <= -``gap_tol``: the last layer, at or above the
       penultimate one in the baseline (a gap within tol of 0 is a tie: tol = ``tie_tol``, or ``tie_se`` standard
       errors of the seed's own baseline gap over its examples where that is larger), falls below it in the
       variant;
    3. ``Relatively strong paired change`` -- Δ_lo <= -``strong_delta``: the penultimate layer's SFM
       falls by at least that much;
    4. ``Gap narrows`` -- |g_v| <= |g_b| - ``gap_tol``;
    5. ``Small change`` -- both |Δ_lo| and |Δ_up| are below ``strong_delta``;
    6. otherwise ``No rule matched`` (changes of at least ``strong_delta`` that fit none of the patterns: not a
       size word).

    With the defaults these reproduce the labels of all eight seeds of the paper's Table 3
    (``tests/test_studies.py``):

    >>> PatternRules().label(-0.006, 0.066, 0.004, 0.076, "L3"), PatternRules().label(0.027, -0.052, 0.018, -0.061, "L3")
    ('L3-dominant change', 'Ordering reverses')
    >>> PatternRules().label(0.0, 0.0001, 0.02, 0.02, "L3"), PatternRules().label(0.10, 0.13, 0.02, 0.05, "L3")
    ('Small change', 'No rule matched')
    >>> PatternRules().label(0.03, -0.02, -0.0009, -0.04, "L3")  # a baseline tie, then a clear reversal
    'Ordering reverses'
    >>> PatternRules().label(0.03, -0.02, -0.006, -0.04, "L3", gap_se=0.004)  # -0.006 is within 2 SE of 0: a tie
    'Ordering reverses'
    """

    strong_delta: float = 0.05
    dominance_ratio: float = 2.0
    gap_tol: float = 0.01
    min_change: float = 0.01
    tie_tol: float = 0.005
    tie_se: float = 2.0

    def tie(self, gap_se: float | None = None) -> float:
        """The tolerance within which a baseline gap is a tie: ``tie_tol``, or ``tie_se`` standard errors of the
        gap (``gap_se``, over the seed's examples) where that is larger."""
        se = float(gap_se) if gap_se is not None and gap_se == gap_se else 0.0
        return max(self.tie_tol, self.tie_se * se)

    def label(self, d_lo, d_up, gap_b, gap_v, upper_name: str, gap_se: float | None = None) -> str:
        if d_up >= self.min_change and d_up >= self.dominance_ratio * abs(d_lo):
            return f"{upper_name}-dominant change"
        if gap_b >= -self.tie(gap_se) and gap_v <= -self.gap_tol:
            return "Ordering reverses"
        if d_lo <= -self.strong_delta:
            return "Relatively strong paired change"
        if abs(gap_v) <= abs(gap_b) - self.gap_tol:
            return "Gap narrows"
        if max(abs(d_lo), abs(d_up)) < self.strong_delta:
            return "Small change"
        return "No rule matched"


@dataclass(frozen=True)
class AnalysisSettings:
    """Every setting of an analysis (all recorded in its report's provenance).

    Pair and study: ``resamples`` (bootstrap), ``permutations`` (sign-flip draws), ``seed``,
    ``mode`` (RNG procedure: ``shared`` or a reference mode), ``confidence``, ``examples`` (the
    example set of the paired tables) and ``length_examples`` (of the length analyses): all, primary,
    length_sample, test_sample or protocol (the paper's protocol: when a run's examples are the union
    of the primary examples and a length sample, the paired tables use the primary examples and the
    length analyses the length sample; otherwise every example), ``step`` (None: the final one),
    ``missing_fields`` (field-to-field: ``zero`` or ``exclude``), ``gradient_window``, the
    word-map selection rule (``token_map_*``; ``word_example`` names the example instead), ``length_resamples`` (Spearman bootstrap),
    ``rules`` (seed-table pattern labels), ``pairs`` (per-pair parts of a tree report: auto,
    reference, all, none), ``factor``/``baseline`` (the factor whose levels form the pairs and
    its baseline level), ``study`` (the study to analyse in a tree that holds several; None: the
    tree must hold one), ``skip_incomplete`` (leave out runs still being written),
    ``trivial_queries`` (include / exclude queries whose visible keys all lie in their own field;
    None: exclude for causal runs, include otherwise; METHODS 3.1) and ``keys`` (all / named:
    SFM over all keys or renormalised over the named keys; METHODS 3.2), ``flow`` (norm-weighted and
    rollout SFM from full matrices: on, off, or auto = when the two runs' matrices files at the step
    total at most ``flow_max_mb`` MB, since they are read whole). Sentences: ``alpha`` (the level every
    claim is judged at), ``length_rho`` (kept for old scripts; the length association is now named by p_Holm),
    ``capped_examples`` (``exclude``: the length analyses leave out the examples cut at the cap, whose
    true length is unknown; ``include``). MoFA: ``in_domain``, ``test`` (t or signflip), ``holm_family``.
    Regime: ``probes`` (random directions per point) and ``layer``/``example``/``token``
    (None: every stored point).
    """

    resamples: int = Resampling.resamples
    permutations: int = Resampling.permutations
    seed: int = Resampling.seed
    mode: str = Resampling.mode
    confidence: float = Resampling.confidence
    examples: str = "protocol"
    length_examples: str = "protocol"
    step: int | None = None
    missing_fields: str = "zero"
    gradient_window: int = 10
    token_map_min_length: int = 20
    token_map_max_length: int = 30
    token_map_min_tokens_per_field: int = 4
    token_map_layers: tuple[int, ...] | None = None  # default: the last two layers
    token_map_max_words: int = 40  # a longer example is shown as a window of this many words
    word_example: int | None = None  # the word map's example, chosen by the user (else by the rule)
    length_resamples: int = Resampling.length_resamples
    rules: PatternRules = field(default_factory=PatternRules)
    pairs: str = "auto"
    factor: str = "variant"
    baseline: str = "baseline"
    study: str | None = None
    skip_incomplete: bool = False
    trivial_queries: str | None = None
    keys: str = "all"
    flow: str = "auto"
    flow_max_mb: int = 256
    in_domain: str | None = "docstrings"
    test: str = "t"
    holm_family: bool = False
    probes: int = 512
    alpha: float = 0.05
    length_rho: float = 0.5
    capped_examples: str = "exclude"
    layer: int | None = None
    example: int | None = None
    token: int | None = None

    def __post_init__(self):
        self.resampling  # validates resamples, permutations, seed, confidence, mode, length_resamples
        for name in ("examples", "length_examples"):
            if getattr(self, name) not in EXAMPLE_SETS:
                raise RoutestatsError(f"{name} must be one of {', '.join(EXAMPLE_SETS)}, got {getattr(self, name)!r}")
        if self.probes < 1:
            raise RoutestatsError("probes must be positive")
        if self.token_map_max_words < 4:
            raise RoutestatsError(f"token_map_max_words must be at least 4, got {self.token_map_max_words}")
        for name, v in (("--alpha", self.alpha), ("length_rho", self.length_rho)):  # the one a user gave, named
            if not 0 < v < 1:
                raise RoutestatsError(f"{name} must lie strictly between 0 and 1, got {v}")
        if self.capped_examples not in ("exclude", "include"):
            raise RoutestatsError(f"capped_examples must be exclude or include, got {self.capped_examples!r}")
        if self.pairs not in ("auto", "reference", "all", "none"):
            raise RoutestatsError(f"pairs must be auto, reference, all or none, got {self.pairs!r}")
        if self.missing_fields not in ("zero", "exclude"):
            raise RoutestatsError(f"missing_fields must be zero or exclude, got {self.missing_fields!r}")
        if self.trivial_queries not in (None, "include", "exclude"):
            raise RoutestatsError(f"trivial_queries must be include or exclude, got {self.trivial_queries!r}")
        if self.flow not in ("auto", "on", "off"):
            raise RoutestatsError(f"flow must be auto, on or off, got {self.flow!r}")
        if self.keys not in ("all", "named"):
            raise RoutestatsError(f"keys must be all or named, got {self.keys!r}")
        if self.test not in ("t", "wilcoxon", "signflip"):
            raise RoutestatsError(f"test must be t, wilcoxon or signflip, got {self.test!r}")

    @property
    def resampling(self) -> Resampling:
        """The random procedures' settings as one object (what the statistics take)."""
        return Resampling(self.resamples, self.permutations, self.seed, self.confidence, self.mode,
                          self.length_resamples)

    @classmethod
    def of(cls, settings: "AnalysisSettings | None" = None, **overrides) -> "AnalysisSettings":
        """``settings`` (default: the defaults) with keyword overrides; unknown keywords are an error."""
        names = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - names)
        if bad:
            raise RoutestatsError(f"unknown setting(s) {', '.join(bad)}; settings are: {', '.join(sorted(names))}")
        return replace(settings or cls(), **overrides)

    def to_dict(self) -> dict:
        return asdict(self)


def env_number(name: str, default: float, *, minimum: float = 0.0, integer: bool = False, positive: bool = False,
               off: float | None = None) -> float:
    """The environment variable ``name`` as a number (``default`` when unset or empty): the one place where
    routestats reads numeric environment variables. A value that is no finite number, not whole where
    ``integer``, below ``minimum`` or (``positive``) not above 0 is refused in one line naming the variable;
    ``off`` is the value that stands for "use the default" (0 for figure workers).

    >>> import os
    >>> os.environ["ROUTESTATS_X"] = "3"; env_number("ROUTESTATS_X", 1, integer=True)
    3
    >>> os.environ["ROUTESTATS_X"] = "inf"
    >>> try:
    ...     env_number("ROUTESTATS_X", 1)
    ... except RoutestatsError as e:
    ...     print(e)
    ROUTESTATS_X=inf: expected a finite number of at least 0 (unset it for the default, 1)
    >>> del os.environ["ROUTESTATS_X"]
    """
    import math
    import os

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    kind = "a whole number" if integer else "a finite number"
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < minimum or (positive and value <= 0) or (integer and value != int(value)):
        bound = "above 0" if positive else f"of at least {minimum:g}"
        raise RoutestatsError(f"{name}={raw}: expected {kind} {bound} (unset it for the default, {default:g})")
    if off is not None and value == off:
        return default
    return int(value) if integer else value


ENVIRONMENT = {  # name: keywords of env_number: every numeric variable routestats reads
    "ROUTESTATS_MAX_DECODE_MB": dict(default=2048, positive=True),
    "ROUTESTATS_MAX_DECODE_RATIO": dict(default=200, minimum=1),
    "ROUTESTATS_FIGURE_WORKERS": dict(default=0, integer=True),
}


def check_environment() -> None:
    """Refuse, in one line naming it, a numeric environment variable of :data:`ENVIRONMENT` that is set to
    something else than a number in range; the CLI calls this before any work."""
    for name, kw in ENVIRONMENT.items():
        env_number(name, **kw)
