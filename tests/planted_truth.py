"""Planted-truth scenarios and an independent checker of the pair report's sentences (issue [true-words]).

A :class:`Scenario` writes a pair with ``synthetic_pair(exact_null=True)`` whose population truth is known in
closed form: every layer draws its logits from the same process (one same-field bias for all layers), the two
runs are exchangeable, and the variant adds ``effect[l]`` to the same-field logits of layer ``l``. Hence

* the population Δ SFM of layer ``l`` has the sign of ``effect[l]`` (0 exactly when the effect is 0);
* population Δs are equal across layers exactly when the planted effects are; the population SFM of the
  baseline is the same in every layer, and the variant's layers are ordered as their effects;
* a layer with no planted effect has population Spearman ρ(length, Δ) = 0 (Δ is symmetric about 0 given the
  example);
* every checkpoint step draws from the same process, so the population Δ does not change between steps.

:func:`judge` reads what a user gets -- ``claims.csv``, ``tables/*.csv`` and the run's ``examples.parquet`` --
and judges each printed sentence against that truth and against the table rows it cites. It shares no code
with the sentence builders (it parses the words and recomputes the decision rules from the cells).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

ALPHA = 0.05
POSITIVE = {"rose", "fell", "mixed", "differs_across_layers", "depends_on_length"}
NUMBER = re.compile(r"([<≤=]\s*)?(?<![\w.^/])([+\-−]?\d+\.\d+)(?![\d^])")
LAYERS = re.compile(r"(?<![\w-])[Ll]ayers? ((?:\d+(?:–\d+)?(?:, | and )?)+)")


@dataclass(frozen=True)
class Scenario:
    """One planted pair: ``effect`` per layer on the same-field logits, one same-field ``bias`` for all layers."""

    seed: int
    n: int
    effect: tuple[float, ...]
    bias: float = 0.5
    cap: int = 256
    length_range: tuple[int, int] = (6, 30)
    causal: bool = False
    n_fields: int = 2
    steps: tuple[int, ...] = (100,)
    unnamed: int = 0  # the last examples wholly unnamed: no valid query, SFM undefined
    noise_df: float | None = None  # heavy-tailed per-example differences (synthetic_pair's noise_df)
    learned: tuple[float, ...] | None = None  # with it, the variant's bias-off evaluation (synthetic_pair's learned)
    noise_length: float | None = None  # the differences' spread grows with length, their centre does not

    @property
    def layers(self) -> int:
        return len(self.effect)

    def write(self, root: Path) -> Path:
        from routestats.rundir.synthetic import synthetic_pair

        synthetic_pair(root, seed=self.seed, n_examples=self.n, n_layers=self.layers, n_heads=2,
                       same_field_bias=[self.bias] * self.layers, effect=list(self.effect), steps=self.steps,
                       cap=self.cap, length_range=self.length_range, causal=self.causal, n_fields=self.n_fields,
                       exact_null=True, unnamed_examples=self.unnamed, noise_df=self.noise_df,
                       learned=None if self.learned is None else list(self.learned), noise_length=self.noise_length)
        return Path(root)


def draw(rng: np.random.Generator, null: bool = False, max_n: int = 300) -> Scenario:
    """A scenario drawn over the issue's ranges: n 5..max_n, 2..32 layers, nulls, one-layer effects, ties
    (every layer the same effect), ceilings (a large bias), censoring 0–80 %, causal runs, three fields,
    two steps, undefined examples (no named position), heavy-tailed differences (t scale mixture, 1 df), a bias-off
    evaluation splitting each effect into a learned part (none, half or all of it) and a direct part, and differences
    whose spread grows with length (noise scaled by (length / median)^2: dependence without association)."""
    n = int(rng.choice([k for k in (5, 6, 8, 12, 24, 48, 96, 300, 1000) if k <= max_n]))
    layers = int(rng.choice([2, 3, 4, 6, 12, 32] if n <= 96 else [2, 3, 4]))
    sizes = [0.02, 0.1, 0.3, 1.0]
    pattern = "null" if null else str(rng.choice(["one", "tie", "mixed", "mixed"]))
    if pattern == "null":
        effect = [0.0] * layers
    elif pattern == "one":
        effect = [0.0] * layers
        effect[int(rng.integers(layers))] = float(rng.choice(sizes) * rng.choice([-1, 1]))
    elif pattern == "tie":
        effect = [float(rng.choice(sizes) * rng.choice([-1, 1]))] * layers
    else:
        effect = [float(rng.choice([0.0, *sizes]) * rng.choice([-1, 1])) for _ in range(layers)]
    cap = int(rng.choice([256, 256, 24, 14]))  # 24: a few examples censored; 14: most of them
    return Scenario(seed=int(rng.integers(1 << 30)), n=n, effect=tuple(effect),
                    bias=float(rng.choice([0.5, 0.5, 4.0])), cap=cap, causal=bool(rng.random() < 0.25),
                    n_fields=int(rng.choice([2, 2, 3])), steps=(10, 100) if rng.random() < 0.25 else (100,),
                    unnamed=n // 8 if n >= 8 and rng.random() < 0.2 else 0,
                    noise_df=1.0 if rng.random() < 0.2 else None,
                    learned=tuple(float(rng.choice([0.0, 0.5, 1.0])) * e for e in effect) if rng.random() < 0.15
                    else None,
                    noise_length=2.0 if rng.random() < 0.2 else None)


@dataclass
class Verdict:
    kind: str
    where: str
    sentence: str
    problems: list[str] = field(default_factory=list)
    numbers: int = 0
    wrong_numbers: int = 0
    judged_by_truth: bool = False
    exempt: str = ""  # why this sentence is not judged against the truth (EXEMPT), where it is not

    @property
    def true(self) -> bool:
        return not self.problems


def value(text: str) -> float:
    return float(text.replace("−", "-"))


def matches(printed: str, cell: float) -> bool:
    """Whether ``cell`` prints as ``printed`` at its decimals (half a unit of the last digit, either side)."""
    d = len(printed.split(".")[1])
    return bool(np.isfinite(cell)) and abs(cell - value(printed)) <= 0.5 * 10.0 ** -d * (1 + 1e-9) + 1e-12


def layer_list(text: str) -> list[int]:
    out = []
    for part in re.split(r", | and ", text.strip(", ")):
        if "–" in part:
            a, b = part.split("–")
            out += list(range(int(a), int(b) + 1))
        elif part.strip().isdigit():
            out.append(int(part))
    return out


def family_alpha(sentence: str) -> float:
    m = re.search(r"shared by (\d+) headline families", sentence)
    return ALPHA / int(m.group(1)) if m else ALPHA


def load_tables(out: Path) -> dict[str, pd.DataFrame]:
    return {p.stem: pd.read_csv(p) for p in (out / "tables").glob("*.csv")}


def cited(tables: dict, row: pd.Series) -> pd.DataFrame | None:
    t = tables.get(str(row["table"])) if isinstance(row["table"], str) else None
    if t is None:
        return None
    rows = str(row["rows"]) if isinstance(row["rows"], str) else ""
    if rows and row["key"] in t.columns:
        keep = set(rows.split(","))
        return t[t[row["key"]].astype(str).isin(keep)]
    return t


def floors(tables: dict) -> list[tuple[float, float]]:
    """The sign-flip floors, computed here, as the band the draws put each in: of one test with P random sign
    patterns, (c + 1)/(P + 1) where c, the patterns that keep or flip every sign, is binomial(P, 2/2^n): within 4
    Monte Carlo SEs of 2/2^n + 1/(P + 1), and never below 1/(P + 1); of the layer family, L times that."""
    e = tables.get("effects")
    if e is None or not len(e):
        return []
    n, P, L = int(e["n"].min()), int(e["permutations"].iloc[0]), len(e)
    q = 2.0 / 2.0 ** min(n, 1000)
    mid, se = q + 1.0 / (P + 1), 4.0 * np.sqrt(q * (1 - q) / P)
    one = (max(1.0 / (P + 1), mid - se), mid + se)
    return [(min(1.0, L * one[0]), min(1.0, L * one[1])), one]


def missed_change_numbers(v: Verdict, sentence: str, rows: pd.DataFrame | None) -> list[float]:
    """The sizes a null sentence says would be missed at least one time in five, judged by the t-test's own power
    (statsmodels' noncentral t, the SD of each cited layer's differences from its row): a size the t-test detects
    more often than 80% at this n and alpha is a false sentence. Returns the numbers the judgement accepts."""
    from statsmodels.stats.power import TTestPower

    n = int(re.search(r"With (\d+) (?:examples|seeds)", sentence).group(1))
    alpha = value(re.search(r"at α (\d+\.\d+)", sentence).group(1))
    sizes = re.findall(r"layer (\d+)'s SFM smaller than (\d+\.\d+)", sentence) or \
        [(k, x) for x, k in re.findall(r"(\d+\.\d+) \(layer (\d+)\)", sentence)]
    each = re.search(r"smaller than (\d+\.\d+) \(each of them\)", sentence)
    if each and rows is not None:  # one size said for every cited layer
        sizes = [(int(k), each.group(1)) for k in rows["layer"]]
    if not sizes or rows is None:
        v.problems.append("a missed-change sentence that names no size of a cited layer")
        return []
    sd = rows.set_index("layer")["sd_diff" if "sd_diff" in rows else "sd_delta"]  # per example, or per seed
    for k, x in sizes:
        power = TTestPower().power(value(x) / sd[int(k)], nobs=n, alpha=alpha)
        if power > 0.8:
            v.problems.append(f"a change of {x} in layer {k} is seen {power:.2f} of the time by the t-test at n {n}")
    return [value(x) for _, x in sizes] + [0.8]


def check_numbers(v: Verdict, sentence: str, rows: pd.DataFrame | None, tables: dict, judged=()) -> None:
    cells = [] if rows is None else [float(x) for x in rows.select_dtypes("number").to_numpy().ravel()]
    cells += list(judged)
    design = [ALPHA / k for k in range(1, 6)] + [ALPHA]
    fl = floors(tables)
    for m in NUMBER.finditer(sentence):
        op, text = (m.group(1) or "").strip(), m.group(2)
        after = sentence[m.end():m.end() + 1]
        if after == "%":
            continue
        v.numbers += 1
        x = value(text)
        ok = any(matches(text, c) for c in cells + design)
        unit = 10.0 ** -len(text.split(".")[1])
        ok = ok or any(lo <= x < hi + unit for lo, hi in fl)  # a floor, rounded up
        if "attainable" in sentence[max(0, m.start() - 30):m.start()]:  # a floor cell, rounded up
            ok = ok or any(x >= c and x - c < unit for c in cells)
        if op == "<" and text == "0.001":  # fmt_p's "< 0.001": some p of the cited rows is below it (a per-layer
            # finding cites one row: its own p); any smaller cell, a Δ or a floor, does not license it
            pcells = [] if rows is None else [float(c) for col in rows.columns if re.match(r"p(_|$)", col)
                                              and "floor" not in col for c in rows[col].dropna()]
            ok = any(c < x for c in pcells)
        if not ok:
            v.wrong_numbers += 1
            v.problems.append(f"number {op}{text} is no cell of the cited rows")
    if rows is not None and "layer" in rows.columns:
        named = [k for g in LAYERS.findall(sentence) for k in layer_list(g)]
        known = {int(x) for c in ("layer", "runner_up") if c in rows.columns for x in rows[c].dropna()}
        extra = set(named) - known
        if extra:
            v.problems.append(f"layers {sorted(extra)} are not among the cited rows")


def said_by_words(sentence: str, n_layers: int) -> dict[int, str]:
    """What a direction sentence says of each layer, read from its own words (never from the builder's
    ``asserts`` column): "SFM rose in layers 0 and 2 (", "SFM fell in layer 1 (", "in layer 3 the ... interval
    [..] excludes 0", "in layers 1 and 3 the 95% intervals include 0", "in all 4 layers"."""
    out: dict[int, str] = {}

    def layers(phrase: str) -> list[int]:
        return list(range(n_layers)) if phrase.startswith("all") else layer_list(phrase.split(" ", 1)[1])

    def say(ks, word):
        for k in ks:  # a layer said two things is said "both": no rule licenses that
            out[k] = word if out.get(k, word) == word else "both"

    for word in ("rose", "fell"):
        for m in re.finditer(rf"SFM {word} in (all \d+ layers|layers? [\d–, and]+?) \(", sentence):
            say(layers(m.group(1)), word)
    for m in re.finditer(r"in (layers? [\d–, and]+?) the (?:per-layer )?[\d.]+% intervals? (?:\[[^\]]*\] )?"
                         r"(excludes|includes?) 0", sentence):
        say(layers(m.group(1)), "excludes" if m.group(2) == "excludes" else "includes")
    return out


def direction(v: Verdict, sentence: str, asserts: str, rows: pd.DataFrame, sc,
              cols: tuple[str, str, str] = ("p_holm", "ci_low", "ci_high"), short: str = "") -> None:
    """Rose/fell/excludes/includes per layer, read from the words: each named layer's decision rule recomputed
    from its cells and its planted sign; every cited layer the rule calls risen or fallen must be named so
    (a layer left out is a silence, and fails); the brief form names the same layers."""
    a = family_alpha(sentence)
    by_layer = rows.set_index("layer")
    said = said_by_words(sentence, sc.layers)
    rule_of = {}
    for layer, r in by_layer.iterrows():
        p, lo, hi = (float(r[c]) for c in cols)
        rule_of[int(layer)] = {"rose": p < a and lo > 0, "fell": p < a and hi < 0,
                               "excludes": p >= a and (lo > 0 or hi < 0), "includes": lo <= 0 <= hi}
    for layer, word in said.items():
        if layer not in rule_of:
            v.problems.append(f"layer {layer} is not among the cited rows")
            continue
        if not rule_of[layer].get(word, False):
            r = by_layer.loc[layer]
            v.problems.append(f"layer {layer} '{word}' disagrees with its row (p_Holm {float(r[cols[0]]):.4g}, "
                              f"[{float(r[cols[1]]):.4g}, {float(r[cols[2]]):.4g}])")
        e = sc.effect[layer]
        if word == "rose" and not e > 0 or word == "fell" and not e < 0:
            v.problems.append(f"layer {layer} '{word}' but the planted effect is {e:+g}")
    for layer, rule in rule_of.items():  # silence: a layer the rule decides, not said so
        for word in ("rose", "fell"):
            if rule[word] and said.get(layer) != word:
                v.problems.append(f"layer {layer}'s row says '{word}' (p_Holm < {a:g}, interval on that side); "
                                  f"the words say {said.get(layer, 'nothing')!r}")
    if asserts and said != {int(k): w for k, w in (x.split("=") for x in asserts.split(";") if x)}:
        v.problems.append("the words and the builder's own record of them disagree")
    for word in ("rose", "fell"):  # the brief form (the first-screen answer) names the same layers as the words
        if short:
            m = re.search(rf"(?:SFM|and) {word} in (all \d+ layers|layers? [\d–, and]+?) of \d+", short) or \
                re.search(rf"(?:SFM|and) {word} in (all \d+ layers)", short)
            named = set(range(sc.layers)) if m and m.group(1).startswith("all") else \
                set(layer_list(m.group(1).split(" ", 1)[1])) if m else set()
            if named != {k for k, w in said.items() if w == word}:
                v.problems.append(f"the brief form {short[:40]!r}… names {sorted(named)} as '{word}', the words "
                                  "say otherwise")
    v.judged_by_truth = True


# Every claim kind is judged against the planted truth (or the design the scenario planted, or an independent
# computation of what it asserts), or exempt here with the reason; a printed kind in neither is a false sentence
# ("neither judged nor exempt"): a new kind of sentence must be judged before it ships.
EXEMPT = {
    "layer_effect": "one layer's row restated (each number checked against its cell, a floor against its closed "
                    "form); it claims no direction (the answer that does is judged)",
    "seed_layer": "one layer's row across seeds restated (each number checked against its cell); the answer that "
                  "claims a direction is judged",
    "profile_distance": "an estimated distance and its interval; it asserts no ordering and no difference",
    "no_evidence_shape": "a non-rejection ('the data do not show'), true whatever the population; its floor and p "
                         "are checked against their cells",
    "highest_tie": "a non-rejection; judged false only where its row singles one layer out",
    "highest_layer": "with one other layer and no runner-up column there is no ordering to judge",
    "largest_contrast": "where its interval includes 0 it orders nothing (where it excludes 0, the order is judged)",
    "length_adjusted": "the fitted slope at the sample's median length, its sign checked against its row; the "
                       "scenarios plant no length dependence to judge it by, except in null layers (judged there)",
    "length_not_claimed": "a non-rejection ('no length association is claimed', with the layer closest to the "
                          "threshold): true whatever the population; its ρ and p_Holm are checked against their cells",
    "layers_listed": "navigation: says where the per-layer rows are",
    "same_sign": "a statement about the seeds' sample means (one sign, and how many layers reach α, both recomputed "
                 "from the rows); it claims no population direction (the answer beside it does, and is judged)",
}


def settle(v: Verdict) -> Verdict:
    """A sentence not judged against the truth is exempt by its kind, with the reason, or is a problem."""
    if not v.judged_by_truth:
        v.exempt = EXEMPT.get(v.kind, "")
        if not v.exempt:
            v.problems.append(f"claim kind {v.kind!r} is neither judged against the truth nor exempt with a reason")
    return v


def judge_design(v: Verdict, s: str, used: int, bias_off: bool = False, tables: dict | None = None) -> None:
    """Kinds judged by the design the scenario planted: one initialisation (no seeds), a bias-off evaluation or
    none (``bias_off``), every stored step drawn from one process, ``used`` examples analysed."""
    v.judged_by_truth = True
    if v.kind == "direct_learned":  # the split exists only with the evaluation; total = direct + learned per layer
        d = (tables or {}).get("decomposition")
        if not bias_off or d is None:
            v.problems.append("a direct/learned split, but the design has no bias-off evaluation")
        else:
            w = d.groupby(["layer", "component"])["mean_diff"].mean().unstack("component")
            if float((w["total"] - w["direct"] - w["learned"]).abs().max()) > 1e-9:
                v.problems.append("total ≠ direct + learned in the decomposition table")
    if v.kind == "needs_bias_off" and bias_off:
        v.problems.append("says a bias-off evaluation would split it, beside one that does")
    one_model = re.search(r"within one (model|initialisation)", s) and not re.search(r"across \d+ seeds", s)
    if v.kind == "scope" and not one_model:
        v.problems.append("the scope is one model (one initialisation, examples as the unit)")
    elif v.kind == "needs_bias_off" and "not shown by this design" not in s:
        v.problems.append("the design has no bias-off evaluation: the split is not shown")
    elif v.kind == "early_share":
        m = re.search(r"reaches p_Holm < [\d.]+ in (no layer|layers? [\d–, and]+)", s)
        if not m or m.group(1) != "no layer":
            v.problems.append("a change between steps (or none stated), but every step draws from the same process")
    elif v.kind == "small_sample_intervals":
        m = re.match(r"With (\d+) examples", s)
        if not m or int(m.group(1)) != used:
            v.problems.append(f"the intervals rest on {used} examples")


def judge_row(row: pd.Series, tables: dict, sc: Scenario, examples: pd.DataFrame) -> Verdict:
    s, kind = str(row["sentence"]), str(row["kind"])
    v = Verdict(kind, str(row["where"]), s)
    rows = cited(tables, row)
    judged = missed_change_numbers(v, s, rows) if kind == "missed_change" else ()
    v.judged_by_truth = kind == "missed_change"  # judged by the t-test's own power at the row's SD (statsmodels)
    check_numbers(v, s, rows, tables, judged)
    if kind in ("scope", "needs_bias_off", "early_share", "small_sample_intervals", "direct_learned"):
        judge_design(v, s, sc.n - sc.unnamed, sc.learned is not None, tables)
    asserts = row["asserts"] if isinstance(row["asserts"], str) else ""
    if kind in ("rose", "fell", "mixed", "no_evidence") and rows is not None:
        short = row["short"] if isinstance(row.get("short"), str) else ""
        direction(v, s, asserts, rows, sc, short=short)
        if short and f"({sc.n - sc.unnamed} examples)" not in short:
            v.problems.append(f"the brief answer does not count the {sc.n - sc.unnamed} examples it rests on")
        used = sc.n - sc.unnamed
        said = f"({used} of {sc.n} examples; {sc.unnamed} without a valid query left out" if sc.unnamed else \
            f"({sc.n} examples"
        if said not in s:
            v.problems.append(f"the lead does not count {used} of {sc.n} examples")
    elif kind == "adjusted_counts":
        v.judged_by_truth = True
        m = re.search(r"(\d+) of (\d+) examples", s)
        q = re.search(r"(\d+) without a valid query", s)
        if not m or int(m.group(2)) != sc.n or (int(q.group(1)) if q else 0) != sc.unnamed:
            v.problems.append(f"adjusted counts: {sc.n} examples, {sc.unnamed} without a named position")
    elif kind == "differs_across_layers":
        v.judged_by_truth = True
        if len(set(sc.effect)) == 1:
            v.problems.append("the change differs across layers, but every layer has the same planted effect")
    elif kind == "largest_contrast" and rows is not None and len(rows):
        r = rows.iloc[0]
        if r["ci_low"] > 0 or r["ci_high"] < 0:
            v.judged_by_truth = True
            truth = np.sign(sc.effect[int(r["layer_b"])] - sc.effect[int(r["layer_a"])])
            if truth != np.sign(r["mean_diff"]):
                v.problems.append(f"the contrast's interval excludes 0 on the side the planted effects do not ({truth:+g})")
    elif kind == "length_adjusted" and rows is not None:
        bins = tables.get("length_bins")

        def bin_signs(k):  # the signs of layer k's mean Δ over the length bins, shortest first, read from the table
            t = bins[bins["layer"] == k].sort_values("bin") if bins is not None else None
            return [] if t is None else [float(np.sign(x)) for x in t["mean_delta"]]

        for word, sign in (("larger", 1), ("smaller", -1)):
            m = re.search(rf"\|Δ\| is {word} in longer examples in (layers? [\d–, and]+)", s)
            for k in layer_list(m.group(1).split(" ", 1)[1]) if m else []:
                r = rows[rows["layer"] == k].iloc[0]
                if np.sign(r["slope_per_10"] * r["delta_at_reference"]) != sign:
                    v.problems.append(f"|Δ| said {word} with length in layer {k}; its slope and Δ say otherwise")
                if len(set(bin_signs(k))) != 1:
                    v.problems.append(f"|Δ| said {word} in layer {k}, whose Δ changes sign across the length bins")
        for m in re.finditer(r"in (layers? [\d–, and]+) Δ turns from ([+−]) to ([+−])", s):
            for k in layer_list(m.group(1).split(" ", 1)[1]):
                signs = bin_signs(k)
                said = [1.0 if m.group(2) == "+" else -1.0, 1.0 if m.group(3) == "+" else -1.0]
                if not signs or [signs[0], signs[-1]] != said:
                    v.problems.append(f"Δ said to turn {m.group(2)} to {m.group(3)} in layer {k}; its bins say {signs}")
        named = [k for g in LAYERS.findall(s) for k in layer_list(g)]
        if any(sc.effect[k] == 0 for k in named):
            v.judged_by_truth = True
            v.problems.append("a length dependence said of a layer whose planted effect is 0 (ρ = 0)")
    elif kind == "depends_on_length":
        v.judged_by_truth = True
        named = [k for g in LAYERS.findall(s) for k in layer_list(g)]
        nulls = [k for k in named if sc.effect[k] == 0]
        if nulls:
            v.problems.append(f"a length association named in layers {nulls}, whose planted effect is 0 (ρ = 0)")
    elif kind in ("highest_layer", "highest_tie") and rows is not None and len(rows):
        r = rows.iloc[0]
        if kind == "highest_layer" and "runner_up" in r and pd.notna(r["runner_up"]):
            v.judged_by_truth = True
            top, runner = int(r["layer"]), int(r["runner_up"])
            if not (r["ci_low"] > 0 and r["p_adj"] < ALPHA):
                v.problems.append("'highest' beside an interval or p that does not license it")
            if r["role"] == "baseline" or not sc.effect[top] > sc.effect[runner]:
                v.problems.append(f"layer {top} said above layer {runner}; in the population they are equal or "
                                  "ordered the other way")
        elif kind == "highest_tie" and r["ci_low"] > 0 and r["p_adj"] < ALPHA:
            v.problems.append("'no layer distinguishable' beside an interval and p that single one out")
    elif kind == "censoring":
        v.judged_by_truth = True
        cut = int(((examples["prepared_length"] >= examples["cap"])).sum())
        m = re.match(r"(\d+) of (\d+) examples", s)
        if not m or (int(m.group(1)), int(m.group(2))) != (cut, sc.n):
            v.problems.append(f"censoring count: {cut} of {sc.n} examples reach the cap")
    elif kind in ("grew", "shrank", "reversed", "early_change"):
        v.judged_by_truth = True
        v.problems.append("a change between steps, but every step draws from the same process")
    elif kind == "pair_floor":
        v.judged_by_truth = True
        m = re.search(r"smallest attainable p_Holm is (\d+\.\d+)", s)
        if not m or not any(value(m.group(1)) >= lo for lo, _ in floors(tables)):
            v.problems.append("the floor is printed below its exact value")
    return settle(v)


def judge(out: Path, sc: Scenario, run_dir: Path) -> list[Verdict]:
    """Every printed sentence of the report folder ``out`` judged against the scenario's truth."""
    claims = pd.read_csv(out / "claims.csv")
    tables = load_tables(out)
    examples = pd.read_parquet(next(Path(run_dir).glob("*/examples.parquet")))
    printed = claims[claims["printed"]]
    return [judge_row(r, tables, sc, examples) for _, r in printed.iterrows()] + [silence(printed, sc, examples)]


def silence(printed: pd.DataFrame, sc: Scenario, examples: pd.DataFrame) -> Verdict:
    """What the report must say, whatever its builder decided (silence fails): one answer in the headline (which
    layers rose, fell or include 0), its scope, the censoring where examples reach the cap, and the direct/learned
    split where a bias-off evaluation lies beside the pair."""
    v = Verdict("silence", "report", "(what the report must say)")
    v.judged_by_truth = True
    head = printed[printed["where"] == "headline"]
    answers = head[head["kind"].isin(["rose", "fell", "mixed", "no_evidence"])]
    if len(answers) != 1:
        v.problems.append(f"{len(answers)} direction answers in the headline, not one")
    if "scope" not in set(head["kind"]):
        v.problems.append("no scope sentence in the headline")
    cut = int((examples["prepared_length"] >= examples["cap"]).sum())
    if cut and "censoring" not in set(printed["kind"]):
        v.problems.append(f"{cut} of {sc.n} examples reach the cap, and no sentence says so")
    if sc.learned is not None and "direct_learned" not in set(head["kind"]):
        v.problems.append("a bias-off evaluation lies beside the pair, and the headline does not split the change")
    return v


def any_positive(out: Path) -> set[str]:
    """The positive claim kinds printed in the headline (on an exact null, each is a false positive)."""
    c = pd.read_csv(out / "claims.csv")
    head = c[c["printed"] & (c["where"] == "headline")]
    # the early share is positive where it says the difference changed from the earliest step to the end
    moved = head[(head["kind"] == "early_share") & head["sentence"].str.contains("from then to the end it ")]
    return (set(head["kind"]) & POSITIVE) | ({"early_change"} if len(moved) else set())


def summary(verdicts: list[Verdict]) -> dict:
    n = len(verdicts)
    return {"sentences": n, "true": sum(v.true for v in verdicts),
            "true_rate": sum(v.true for v in verdicts) / max(n, 1),
            "judged_by_truth": sum(v.judged_by_truth for v in verdicts),
            "exempt": sum(bool(v.exempt) for v in verdicts),
            "neither": sum(not v.judged_by_truth and not v.exempt for v in verdicts),
            "numbers": sum(v.numbers for v in verdicts), "wrong_numbers": sum(v.wrong_numbers for v in verdicts)}


def run_scenario(sc: Scenario, root: Path, **settings) -> tuple[list[Verdict], set[str]]:
    """Write the scenario, analyse it, write its report folder, judge it."""
    import reports
    import routestats as rs

    runs = sc.write(root / "runs")
    kw = dict(resamples=999, permutations=999, length_resamples=199, flow="off", seed=sc.seed % 1000)
    kw.update(settings)
    rep = rs.analyse(runs, **kw)
    reports.write(rep, root / "out", ("markdown",))
    return judge(root / "out", sc, runs), any_positive(root / "out")
