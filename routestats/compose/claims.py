"""The sentence helpers the report kinds share, and the claims more than one kind makes (METHODS 3.7).

Every sentence is built by the section that holds its frames, with the preconditions that license
it (:class:`~routestats.claim.Check` s, computed from the rows it cites), so that the words never
disagree with the interval printed beside them:

* **one decision rule per family.** A layer "rose" or "fell" when its Holm-adjusted p is below
  alpha *and* its interval excludes 0 on that side. Intervals are per layer (not adjusted for
  multiplicity; the tables say so): a layer whose interval excludes 0 while its Holm-adjusted p does
  not reach alpha is said to be exactly that, and a layer whose interval includes 0 is said to
  include 0 -- never "no change";
* **mechanism only from the design that shows it:** the share of the final difference present at
  the earliest step is a number; what the bias does mechanically is stated only from a bias-off
  evaluation, and otherwise the sentence says which run would show it;
* **censoring stated:** examples cut at the cap are counted; the length association is named in the
  layers whose Spearman ρ reaches p_Holm below the family's alpha with its interval excluding 0, of
  either sign, as an association, with the examples it rests on;
* **one error rate for the headline:** the pair headline's families (layers, profile shape, length) share
  alpha (Bonferroni: each at alpha / their number), so on data with no effect some positive headline
  claim appears in at most alpha of reports;
* **p-values never below what the test can reach:** :func:`routestats.report.fmt_p`, and "the
  smallest attainable" where every value sits at the permutation floor.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.claim import Check, Claim, verdicts
from routestats.report import Figure, at_floor, floor_text, fmt_ci, fmt_num, fmt_p
from routestats.stats.power import detectable_change

__all__ = ["SFM_TERMS", "layers_phrase", "direction_claim", "missed_change_claims", "direct_learned_claim", "design_claims", "signed", "span", "span_r", "p_after",
           "ci_text", "p_max_phrase", "floor_text", "rows_of", "profile_claims"]

SFM_TERMS = (("SFM (same-field attention mass)", "the share of a query's attention that goes to keys of its own "
              "field, averaged over queries, heads and examples"), ("Δ", "variant − baseline, per example"))
"""The glossary of the reports that speak of SFM (:attr:`routestats.report.Report.terms` shows what a page uses)."""


def layers_phrase(xs) -> str:
    """'layer 2', 'layers 0 and 3', 'layers 0–3', 'layers 0–2, 5 and 7'.

    >>> layers_phrase([3]), layers_phrase([0, 3]), layers_phrase([0, 1, 2, 3]), layers_phrase([0, 1, 2, 5, 7])
    ('layer 3', 'layers 0 and 3', 'layers 0–3', 'layers 0–2, 5 and 7')
    >>> layers_phrase([])  # a withheld claim's empty selection
    'no layer'
    """
    xs = sorted(int(x) for x in xs)
    if not xs:
        return "no layer"
    runs, start = [], xs[0]
    for a, b in zip(xs, xs[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}–{a}" if a - start >= 2 else f"{start}, {a}")
            start = b
    parts = ", ".join(runs).split(", ")
    word = "layer " if len(xs) == 1 else "layers "
    return word + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1])


def scale_decimals(*values, least: int = 3) -> int:
    """Decimals that show the largest magnitude among ``values`` (a number, or an interval's two ends) with two
    significant digits (at least ``least``, at most 8): a sentence never prints "Δ 0.000" beside "fell", nor
    "[−0.000, 0.000]".

    >>> scale_decimals(0.1234), scale_decimals(-0.0004, 0.0003), scale_decimals(-0.005, 0.247), scale_decimals(0.0)
    (3, 5, 3, 3)
    """
    mags = [abs(float(v)) for v in values if np.isfinite(v) and v != 0]
    if not mags:
        return least
    return int(min(8, max(least, -np.floor(np.log10(max(mags))) + 1)))


def signed(x: float, digits: int | None = None) -> str:
    """A signed number as the sentences print it, with decimals from its scale (:func:`scale_decimals`);
    one that rounds to zero has no sign.

    >>> signed(0.1234), signed(-0.05), signed(-0.00001), signed(0.0004, 3)
    ('+0.123', '−0.050', '−0.000010', '0.000')
    """
    digits = scale_decimals(x) if digits is None else digits
    text = fmt_num(abs(x), digits)
    if float(text) == 0:
        return text
    return ("+" if x >= 0 else "−") + text


def span_r(r) -> str:
    """The range of correlations as the sentences print them (two decimals, typographic minus)."""
    lo, hi = f"{r.min():.2f}".replace("-", "−"), f"{r.max():.2f}".replace("-", "−")
    return lo if lo == hi else f"{lo} to {hi}"


def span(values) -> str:
    """'+0.010 to +0.120', or one value when both ends print the same; both ends with one scale
    (:func:`scale_decimals`), unless they differ more than ten-fold: then each with its own, so a small end
    never prints as 0.

    >>> span([0.01, 0.12]), span([0.000064, 0.043]), span([-0.00023, -0.0000037])
    ('+0.010 to +0.120', '+0.000064 to +0.043', '−0.00023 to −0.0000037')
    """
    a, b = float(min(values)), float(max(values))
    small, large = sorted((abs(a), abs(b)))
    if small > 0 and large > 10 * small:
        lo, hi = signed(a), signed(b)
    else:
        d = scale_decimals(a, b)
        lo, hi = signed(a, d), signed(b, d)
    return lo if lo == hi else f"{lo} to {hi}"


def p_max_phrase(ps, floor: float | None, note: str = "") -> str:
    """The largest Holm p of a group of layers, said as the smallest attainable where it is at the floor
    (printed never below the floor's exact value: :func:`floor_text`).

    >>> p_max_phrase([0.0004, 0.0003], 4 / 10001), p_max_phrase([0.25], 0.25, " with 5 examples")
    ('p_Holm < 0.001, the smallest attainable', 'p_Holm = 0.250, the smallest attainable with 5 examples')
    """
    pmax = float(np.max(ps))
    if at_floor(pmax, floor):
        text = floor_text(pmax, floor)
        op = "" if text.startswith("<") else "= " if len(ps) == 1 else "≤ "
        return f"p_Holm {op}{text}, the smallest attainable{note}"
    text = fmt_p(pmax)
    return f"p_Holm {text}" if text.startswith("<") else f"p_Holm {'= ' if len(ps) == 1 else '≤ '}{text}"


def p_after(p) -> str:
    """'= 0.012' or '< 0.001': a p-value after its name."""
    text = fmt_p(p)
    return text if text.startswith("<") else f"= {text}"


def ci_text(lo, hi) -> str:
    """An interval with typographic minus signs and decimals from its scale, as the signed numbers beside it.

    A bound that is not 0 never prints as 0 (a sentence would say "[0.0000, 0.0013] excludes 0"): the decimals
    grow to show its two significant digits (at most 10).

    >>> ci_text(0.05, 0.2), ci_text(-0.0004, 0.0003), ci_text(-0.005, 0.247), ci_text(0.00002, 0.0013)
    ('[0.050, 0.200]', '[−0.00040, 0.00030]', '[−0.005, 0.247]', '[0.000020, 0.001300]')
    """
    digits = scale_decimals(lo, hi)
    for v in (float(lo), float(hi)):
        if np.isfinite(v) and v != 0 and round(v, digits) == 0:
            digits = max(digits, min(10, int(-np.floor(np.log10(abs(v)))) + 1))
    return fmt_ci(lo, hi, digits).replace("-", "−")


def effect_list(g: pd.DataFrame, est: str) -> str:
    """'Δ +0.050 to +0.120' over a group of layers, or each layer's Δ when they differ by more than ten-fold
    (a span never joins effects of different orders of magnitude: 'Δ −0.132 in layer 2, −0.0010 in layer 3')."""
    mags = g[est].abs()
    if len(g) > 1 and mags.min() > 0 and mags.max() > 10 * mags.min() or (len(g) > 1 and mags.min() == 0):
        return "Δ " + ", ".join(f"{signed(r[est])} in layer {int(r['layer'])}" for _, r in g.iterrows())
    return f"Δ {span(g[est])}"


def direction_claim(t: pd.DataFrame, lead: str, *, est: str, p: str, lo: str, hi: str, alpha: float, metric: str,
                    table: str, conf: str, where: str = "headline", floor: float | None = None,
                    family: str = "Holm over layers", floor_note: str = "", brief: str = "") -> Claim:
    """The answer over a family of layers: which rose or fell (p < alpha and the interval on that side
    of 0), which have an interval excluding 0 without reaching alpha after Holm, and which include 0.

    Its brief form (``short``, the report's first-screen answer) says the verdict and ``brief``, the scope in a
    few words; its ``figure`` (kind ``answer_layers``) shows every layer's estimate and interval.

    >>> t = pd.DataFrame({"layer": [0, 1, 2], "d": [0.12, 0.03, 0.01], "p": [0.001, 0.2, 0.6],
    ...                   "lo": [0.05, 0.01, -0.02], "hi": [0.2, 0.06, 0.03]})
    >>> direction_claim(t, "Within one initialisation (8 examples)", est="d", p="p", lo="lo", hi="hi", alpha=0.05,
    ...                 metric="SFM", table="effects", conf="95%").sentence
    'Within one initialisation (8 examples), SFM rose in layer 0 (Δ +0.120, p_Holm = 0.0010); in layer 1 the per-layer 95% interval [0.010, 0.060] excludes 0 but p_Holm = 0.200 (Holm over layers); in layer 2 the 95% interval [−0.020, 0.030] includes 0.'
    """
    t = t.sort_values("layer")
    # each layer's word is the first of these whose check holds of its row (verdicts): the checks choose
    rose, fell, excludes, includes, described = direction_checks(p, lo, hi, alpha, len(t))
    words, gates = verdicts(t, {"rose": rose, "fell": fell, "excludes": excludes, "includes": includes}, metric,
                            table)
    said_of = pd.Series(words, index=t.index)
    up, down, excl, incl = (t[said_of == w] for w in ("rose", "fell", "excludes", "includes"))
    parts = []
    for word, g in (("rose", up), ("fell", down)):
        if len(g):
            where_ = f"all {len(t)} layers" if len(g) == len(t) and len(t) > 1 else layers_phrase(g["layer"])
            parts.append(f"{metric} {word} in {where_} ({effect_list(g, est)}, "
                         f"{p_max_phrase(g[p].to_numpy(), floor, floor_note)})")
    text = "; ".join(parts) if parts else f"no layer's {metric} change reaches p_Holm < {alpha:g}"
    for r in excl.itertuples():
        text += (f"; in layer {r.layer} the per-layer {conf} interval {ci_text(getattr(r, lo), getattr(r, hi))} "
                 + (f"excludes 0 but p_Holm = {floor_text(getattr(r, p), floor)}, the smallest attainable{floor_note}"
                    if at_floor(getattr(r, p), floor) else f"excludes 0 but p_Holm {p_after(getattr(r, p))}")
                 + f" ({family})")
    if len(incl) == 1:
        r = incl.iloc[0]
        text += f"; in layer {int(r['layer'])} the {conf} interval {ci_text(r[lo], r[hi])} includes 0"
    elif len(incl):
        w = incl.assign(width=incl[hi] - incl[lo]).sort_values("width").iloc[-1]
        text += (f"; in {layers_phrase(incl['layer'])} the {conf} intervals include 0 (the widest "
                 f"{ci_text(w[lo], w[hi])}, layer {int(w['layer'])})")
    kind = "rose" if len(up) and not len(down) else "fell" if len(down) and not len(up) else \
        "mixed" if parts else "no_evidence"
    evidence = t.assign(asserted=words)
    n = len(t)
    said = [f"{word} in " + (f"all {n} layers" if len(g) == n and n > 1 else f"{layers_phrase(g['layer'])} of {n}")
            for word, g in (("rose", up), ("fell", down)) if len(g)]
    short = (f"{metric} {' and '.join(said)}" if said else f"No layer's {metric} change reaches p_Holm < {alpha:g}") \
        + (f", {brief}" if brief else "") + "."
    figure = Figure("answer", "answer_layers", {"estimates": pd.DataFrame(
        {"layer": t["layer"].astype(int).to_numpy(), "estimate": t[est].to_numpy(float), "low": t[lo].to_numpy(float),
         "high": t[hi].to_numpy(float), "asserted": evidence["asserted"].to_numpy()})},
        {"metric": metric, "conf": conf})
    # its words name layers: a table holding a layer twice (an across-seed table of several data sets) is withheld,
    # not said as "rose in layer 3; in layer 3 ... includes 0" (its per-row findings name the data sets)
    once = Check("one row per layer: the words name layers", "rows == layers", on="design")
    return Claim(kind, f"{lead}, {text}.", where, table, tuple(int(x) for x in t["layer"]), "layer",
                 (described, once), evidence=evidence, design={"layers": int(t["layer"].nunique())}, short=short,
                 figure=figure, verdicts=gates)


def direction_checks(p: str, lo: str, hi: str, alpha: float, rows: int) -> tuple[Check, ...]:
    """The checks of :func:`direction_claim`: the four words a layer can be given, each against the layer's own p
    and interval (the gates of its verdicts), and the claim's own, that every layer of the table got one."""
    a = repr(float(alpha))
    return (Check("rose: p_holm < alpha and ci_low > 0", f"`{p}` < {a} and `{lo}` > 0"),
            Check("fell: p_holm < alpha and ci_high < 0", f"`{p}` < {a} and `{hi}` < 0"),
            Check("excludes 0 without p_holm < alpha", f"`{p}` >= {a} and (`{lo}` > 0 or `{hi}` < 0)"),
            Check("includes 0: ci_low <= 0 <= ci_high", f"`{lo}` <= 0 and `{hi}` >= 0"),
            Check("every layer of the table is described", f"rows == {rows}", "asserted != ''", on="design"))


def direct_learned_claim(decomp: pd.DataFrame, bias_off_runs: int) -> Claim:
    """The split of the total Δ into what the bias does to the trained weights and what training changed,
    from a bias-off evaluation (METHODS 3.4b; the one design that shows the mechanism)."""
    w = decomp.groupby(["component", "layer"])["mean_diff"].mean().unstack("component")
    sp = lambda c: f"{signed(w[c].min())} to {signed(w[c].max())}"  # noqa: E731
    return Claim("direct_learned", f"With the bias switched off on the trained weights, the total Δ "
                 f"({sp('total')} across layers) splits into a direct part, what the bias does to those weights "
                 f"({sp('direct')}), and a learned part, what training changed ({sp('learned')}).", "headline",
                 "decomposition", requires=(Check("a bias-off evaluation exists", "bias_off_runs >= 1", on="design"),
                                            Check("total = direct + learned", "abs(total - direct - learned) <= 1e-9")),
                 evidence=w.reset_index(), design={"bias_off_runs": bias_off_runs})


def design_claims(manifests) -> list[Claim]:
    """What the runs' own manifests say about the evidence's scope, for the first screen (qualifiers of the answer):
    an untouched test sample (``evaluation.split == "test"``, written by ``python -m runners evaluate
    --sample-size``), and training stopped short of its preset's recipe (``training.max_steps`` below
    ``recipe.max_steps``).

    >>> ms = [{"evaluation": {"split": "test", "examples": 256, "records": 2336, "sample_seed": 1001}},
    ...       {"evaluation": {"split": "test", "examples": 256, "records": 2336, "sample_seed": 1001},
    ...        "training": {"max_steps": 20}, "recipe": {"preset": "tiny", "max_steps": 500}}]
    >>> for c in design_claims(ms):
    ...     print(c.short)
    on an untouched test sample of 256, drawn before any model output was seen
    after 20 of the tiny recipe's 500 training steps
    >>> design_claims([{"evaluation": "x", "training": [], "recipe": None}])  # sections that are not objects: nothing
    []
    """
    def part(m, key) -> dict:  # a manifest section, or {} where it is missing or not an object (untrusted input)
        v = m.get(key) if isinstance(m, dict) else None
        return v if isinstance(v, dict) else {}

    def whole(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    manifests = list(manifests)
    out = []
    ev = [part(m, "evaluation") for m in manifests]
    tested = [e for e in ev if e.get("split") == "test" and whole(e.get("examples"))]
    if tested:  # built where any run is a test-sample evaluation; its check asks it of every run
        n = sorted({int(e["examples"]) for e in tested})
        recs = sorted({e["records"] for e in tested if whole(e.get("records"))})
        seeds = sorted({e["sample_seed"] for e in tested if whole(e.get("sample_seed"))})
        size = str(n[0]) if len(n) == 1 else f"{n[0]}–{n[-1]}"
        out.append(Claim("test_sample", f"Evaluated on an untouched test sample of {size} examples"
                         + (f" of the held-out split's {recs[0]} records" if len(recs) == 1 else " of the held-out split")
                         + (f" (reservoir sample, seed {seeds[0]})" if len(seeds) == 1 else "")
                         + ", drawn and recorded (test_manifest.json) before any model output was seen.", "headline",
                         requires=(Check("every run is a test-sample evaluation", "test_runs == runs", on="design"),),
                         design={"test_runs": len(tested), "runs": len(ev)},
                         short=f"on an untouched test sample of {size}, drawn before any model output was seen",
                         qualifier=True))
    known = [(int(part(m, "training")["max_steps"]), part(m, "recipe")) for m in manifests
             if whole(part(m, "training").get("max_steps")) and whole(part(m, "recipe").get("max_steps"))]
    short = [(s, r) for s, r in known if s < int(r["max_steps"])]
    if known:  # built where any run states both step counts; its check, not this if, asks that some stopped short
        steps = sorted({s for s, _ in short or known})
        recipe = (short or known)[0][1]
        said = str(steps[0]) if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"
        out.append(Claim("short_training", f"{len(short)} of {len(manifests)} runs stopped after {said} training steps, "
                         f"short of the {recipe.get('preset')} preset's {recipe['max_steps']}-step recipe: an early "
                         "snapshot of training, not the recipe's result.", "headline",
                         requires=(Check("some run stopped short of its recipe", "short_runs >= 1", on="design"),),
                         design={"short_runs": len(short)},
                         short=f"after {said} of the {recipe.get('preset')} recipe's {recipe['max_steps']} training steps",
                         qualifier=True))
    return out


def rows_of(frame: pd.DataFrame, key: str = "layer") -> tuple:
    """The key values of the rows a claim cites, as ``claims.csv`` lists them."""
    return tuple(int(x) if key == "layer" else x for x in frame[key])


def profile_claims(highest: pd.DataFrame, alpha: float = 0.05, conf: str = "95%") -> list[Claim]:
    """The highest-SFM layer of each model (the ``highest_layer`` table), said only when it is above every
    other layer (each difference's sign-flip p, Bonferroni over the other layers, below ``alpha``, and the
    runner-up's interval excluding 0); otherwise no layer is distinguishable as the highest."""
    out = []
    for i in range(len(highest)):
        r = highest.iloc[i]
        role, a, ev = str(r["role"]), int(r["layer"]), highest.iloc[[i]]
        if "runner_up" not in r or pd.isna(r.get("runner_up")):
            # said only of a single layer; several layers without per-example values say nothing about a highest
            out.append(Claim("highest_layer", f"One layer in the {role}: layer {a} (SFM {fmt_num(r['sfm'])}); there "
                             "is no other layer to compare it with.", "finding", "highest_layer", (role,), "role",
                             evidence=ev, requires=(Check("one layer only: nothing to tell it from", "layers == 1"),)))
            continue
        b, k = int(r["runner_up"]), int(r["others"])
        # both wordings are built; their checks, not an if beside them, choose the one that prints
        out.append(Claim("highest_layer", f"Highest SFM in the {role}: layer {a} ({fmt_num(r['sfm'])}), above "
                         + (f"each of the other {k} layers" if k > 1 else "the other layer")
                         + f" (sign-flip p_Bonferroni {p_after(r['p_adj'])}); the closest is "
                         f"layer {b}, by {signed(r['difference'])} (paired {conf} interval "
                         f"{ci_text(r['ci_low'], r['ci_high'])}).", "finding", "highest_layer", (role,), "role",
                         requires=(Check("above every other layer: p_adj < alpha, runner-up's interval above 0",
                                         f"p_adj < {alpha!r} and ci_low > 0 and above_all"),),
                         evidence=ev))
        out.append(Claim("highest_tie", f"In the {role}, no layer is distinguishable as the highest: layer {a} "
                         f"({fmt_num(r['sfm'])}) leads layer {b} ({fmt_num(r['runner_up_sfm'])}) by "
                         f"{signed(r['difference'])} (paired {conf} interval {ci_text(r['ci_low'], r['ci_high'])}; "
                         + (f"against the other {k} layers p_Bonferroni" if k > 1 else "sign-flip p")
                         + f" {p_after(r['p_adj'])}).",
                         "finding", "highest_layer", (role,), "role",
                         requires=(Check("not above every other layer",
                                         f"not (p_adj < {alpha!r} and ci_low > 0 and above_all)"),),
                         evidence=ev))
    return out


def missed_change_claims(eff: pd.DataFrame, n_used: int, alpha: float, floor: float, *, table: str, power: float = 0.8,
                         p: str = "p_holm", lo: str = "ci_low", hi: str = "ci_high", sd: str = "sd_diff_low",
                         unit: str = "examples") -> list[Claim]:
    """Beside layers the headline does not call changed: the change each one's test would miss at least one time
    in five at this n (examples, or seeds for the across-seed test), so a null result says what it could have seen.

    Sized by :func:`routestats.stats.power.detectable_change` from ``sd``, a one-sided 97.5 % lower bound on each
    layer's SD (:func:`routestats.stats.spread.sd_lower_bound`): from the sample SD the size overstated what the test
    misses whenever the sample overstated the spread (the report's test detected a change just below it more than
    80 % of the time in 41-59 % of null samples, issue [plan-2])."""
    if sd not in eff:  # a table without the spread of its differences: nothing to size
        return []
    a = repr(float(alpha))
    # the layers it sizes are those whose check holds: not called changed (p_Holm < alpha, the interval off 0)
    words, gates = verdicts(eff, {"not called changed": Check("no cited layer is called changed",
                                                              f"not ({p} < {a} and ({lo} > 0 or {hi} < 0))")},
                            "SFM", table)
    sized = pd.Series([bool(w) for w in words], index=eff.index, dtype=bool)  # a mask, also of no rows
    rows = eff[sized].assign(detectable=lambda t: detectable_change(t[sd], n_used, alpha, power))
    rows = rows.sort_values("detectable")
    # "smaller than x would be missed": x printed rounded down, so every change below the printed size is missed
    down = lambda x, d: fmt_num(np.floor(x * 10.0 ** d) / 10.0 ** d, d)  # noqa: E731
    if len(rows) == 1:
        x = rows['detectable'].iloc[0]
        what = f"a change in layer {int(rows['layer'].iloc[0])}'s SFM smaller than {down(x, scale_decimals(x))}"
    elif len(rows):
        least, most = rows.iloc[0], rows.iloc[-1]
        d = scale_decimals(least["detectable"])
        small, large = down(least["detectable"], d), down(most["detectable"], d)
        what = (f"a change in one of these {len(rows)} layers' SFM smaller than {small} (layer {int(least['layer'])}) "
                f"to {large} (layer {int(most['layer'])})" if small != large else
                f"a change in one of these {len(rows)} layers' SFM smaller than {small} (each of them)")
    else:
        what = "no layer"  # withheld: the check counts the cited layers
    often = {0.8: "one time in five", 0.9: "one time in ten"}.get(power, f"{1 - power:.0%} of the time")
    return [Claim("missed_change", f"With {n_used} {unit}, {what} would be missed at least {often}: {power:.0%} "
                  f"power needs at least (z(1 − α/2) + z({power:g})) × SD/√n at α {alpha:.3g} (normal approximation, a "
                  "lower bound, with each SD at its 97.5% lower bound: true in at least nine samples in ten; `routestats plan` "
                  "simulates the test itself).",
                  "headline", table, tuple(int(v) for v in rows["layer"]), evidence=rows,
                  requires=(Check("a layer not called changed", "rows >= 1 and floor < alpha", on="design"),),
                  design={"floor": floor, "alpha": float(alpha)}, verdicts=gates)]
