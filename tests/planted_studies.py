"""Planted-truth studies (several seeds of one design) and the judge of their own sentences; the single-pair
scenarios and the shared checks are in ``tests/planted_truth.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tests.planted_truth import (ALPHA, Verdict, check_numbers, cited, direction, load_tables, missed_change_numbers,
                                 settle, value)

@dataclass(frozen=True)
class StudyScenario:
    """``seeds`` planted pairs (``root/seed<s>/{baseline,saab}``), each its own draw of examples, all with the
    same per-layer ``effect``: across seeds the population mean Δ of layer ``l`` has the sign of
    ``effect[l]``; the seeds share example ids but not contents (never crossed)."""

    seeds: tuple[int, ...]
    n: int
    effect: tuple[float, ...]
    bias: float = 0.5

    @property
    def layers(self) -> int:
        return len(self.effect)

    def write(self, root: Path) -> Path:
        from routestats.rundir.synthetic import synthetic_pair

        for seed in self.seeds:
            synthetic_pair(Path(root) / f"seed{seed}", seed=seed, n_examples=self.n, n_layers=self.layers, n_heads=2,
                           same_field_bias=[self.bias] * self.layers, effect=list(self.effect), exact_null=True)
        return Path(root)


def pattern_label(d_lo, d_up, g_b, g_v, up: str, gap_se: float = float("nan")) -> str:
    """docs/methods.md's pattern rules, written out again here (first match wins); a baseline gap within
    max(0.005, 2 standard errors) of 0 is a tie."""
    if d_up >= 0.01 and d_up >= 2 * abs(d_lo):
        return f"{up}-dominant change"
    if g_b >= -max(0.005, 2 * gap_se if gap_se == gap_se else 0.0) and g_v <= -0.01:
        return "Ordering reverses"
    if d_lo <= -0.05:
        return "Relatively strong paired change"
    if abs(g_v) <= abs(g_b) - 0.01:
        return "Gap narrows"
    return "Small change" if max(abs(d_lo), abs(d_up)) < 0.05 else "No rule matched"


def judge_study_row(row: pd.Series, tables: dict, sc: StudyScenario) -> Verdict:
    s, kind = str(row["sentence"]), str(row["kind"])
    v = Verdict(kind, str(row["where"]), s)
    rows = cited(tables, row)
    check_numbers(v, s, rows, {}, missed_change_numbers(v, s, rows) if kind == "missed_change" else ())
    v.judged_by_truth = kind == "missed_change"  # judged by the t-test's own power at the row's SD (statsmodels)
    k = len(sc.seeds)
    asserts = row["asserts"] if isinstance(row["asserts"], str) else ""
    if kind in ("rose", "fell", "mixed", "no_evidence") and rows is not None:
        direction(v, s, asserts, rows, sc, ("p_t_holm", "ci_low_t", "ci_high_t"),
                  short=row["short"] if isinstance(row.get("short"), str) else "")
        if f"Across {k} seeds" not in s:
            v.problems.append(f"the lead does not say {k} seeds")
    elif kind == "signflip_floor":
        v.judged_by_truth = True
        m = re.search(r"smallest attainable p = (\d+\.\d+)", s)
        if not m or value(m.group(1)) < 2 / 2 ** k or 2 / 2 ** k <= ALPHA:
            v.problems.append(f"the exact floor is 2/2^{k} = {2 / 2 ** k:g}")
    elif kind == "patterns":
        v.judged_by_truth = True
        t = tables["seeds"]
        want = pd.Series([pattern_label(r.delta_lower, r.delta_upper, r.baseline_gap, r.variant_gap,
                                        f"L{int(r.upper_layer)}", r.baseline_gap_se) for r in t.itertuples()]
                         ).value_counts()
        said = {m.group(1): int(m.group(2)) for m in re.finditer(r"“([^”]+)” in (\d+) of", s)}
        if said != want.to_dict():
            v.problems.append(f"pattern counts {said}; the rules on the seed table give {want.to_dict()}")
    elif kind == "shared_examples":
        v.judged_by_truth = True
        v.problems.append("seeds and examples said crossed, but each seed drew its own examples")
    elif kind == "examples_nested":
        v.judged_by_truth = True
        if f"share their {sc.n} example ids" not in s:
            v.problems.append(f"the seeds share {sc.n} example ids")
    elif kind == "same_sign" and rows is not None:  # read from the words, recomputed from the cited rows
        d = rows["mean_delta"]
        if not ((d > 0).all() or (d < 0).all()):
            v.problems.append("'every layer's mean Δ has the same sign' beside rows of both signs")
        m = re.search(r"(\d+) of (\d+) layers reach(?:es)? p_Holm < (\d+\.\d+)", s)
        reach = int((rows["p_t_holm"] < value(m.group(3))).sum()) if m else -1
        if not m or (int(m.group(1)), int(m.group(2))) != (reach, len(rows)):
            v.problems.append("the count of layers reaching α is not that of the rows")
    elif kind == "counts":
        v.judged_by_truth = True
        if s != f"{2 * k} runs, seeds {', '.join(map(str, sorted(sc.seeds)))}.":
            v.problems.append("run and seed counts")
    return settle(v)


def run_study(sc: StudyScenario, root: Path, **settings) -> list[Verdict]:
    """Write the study tree, analyse it, write its report folder, judge the study's own sentences."""
    import reports
    import routestats as rs

    runs = sc.write(root / "runs")
    kw = dict(resamples=499, permutations=999, length_resamples=199, flow="off", seed=1)
    kw.update(settings)
    rep = rs.analyse(runs, **kw)
    reports.write(rep, root / "out", ("markdown",))
    claims = pd.read_csv(root / "out" / "claims.csv")
    first = claims["part"].iloc[0]
    tables = load_tables(root / "out")
    return [judge_study_row(r, tables, sc) for _, r in claims[claims["printed"] & (claims["part"] == first)].iterrows()]
