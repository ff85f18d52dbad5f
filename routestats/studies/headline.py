"""The headline of a report: 2-5 generated sentences that state the answer at the highest level of
evidence the input holds, its scope, the shape of the change, what was mechanical, and confounds.

The rules (METHODS 3.7), each a function of finished result frames so every branch is tested on
constructed inputs:

* level: a study with >= 2 seeds of the standard pair leads with the across-seed inference (seed
  as the unit, Holm over layers); a single pair says "within one initialisation (N examples)";
* direction and size: the layers whose Holm-adjusted p < alpha, grouped by sign, with the range
  of their Delta; "no layer changed detectably" otherwise;
* shape: when the profile-shape sign-flip test rejects, "the change differs across layers" with its
  p and the largest contrast; otherwise "consistent with a uniform shift";
* mechanics: with an init-vs-final table, the share of the final Delta already present at the
  earliest stored step;
* scope: a pair's p-values measure precision within one model, not the architecture;
* length: any layer with |Spearman rho(length, Delta)| >= 0.5 and a CI excluding 0 (the effect's
  size depends on length: with paired examples it is effect modification, not confounding).

Examples
--------
>>> import pandas as pd
>>> eff = pd.DataFrame({"layer": [0, 1], "mean_diff": [0.12, 0.05], "p_holm": [0.001, 0.2]})
>>> pair_headline(eff, n_examples=32)[0]
'Within one initialisation (32 examples), SFM rose in layer 0 (Δ +0.120, p_Holm 0.001); no detectable change in layer 1.'
"""

from __future__ import annotations

import pandas as pd

from routestats.report import fmt_num, fmt_p

__all__ = ["pair_headline", "study_headline", "direction_sentence", "ALPHA", "RHO_CONFOUND"]

ALPHA = 0.05
RHO_CONFOUND = 0.5


def _layers(xs) -> str:
    xs = sorted(int(x) for x in xs)
    if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)):
        return f"layers {xs[0]}–{xs[-1]}"
    return ("layer " if len(xs) == 1 else "layers ") + ", ".join(map(str, xs[:-1])) + \
        (" and " if len(xs) > 1 else "") + str(xs[-1])


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "−") + fmt_num(abs(x))


def _signed_span(values) -> str:
    """'+0.010' for one value (or equal ends), '+0.010 to +0.050' for a range."""
    lo, hi = _signed(min(values)), _signed(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def direction_sentence(t: pd.DataFrame, est: str, p: str, alpha: float = ALPHA, metric: str = "SFM") -> str:
    """Which layers rose or fell (p < alpha) and by how much; the rest 'no detectable change'."""
    sig = t[t[p] < alpha]
    up, down = sig[sig[est] > 0], sig[sig[est] < 0]
    rest = t[~t.index.isin(sig.index)]
    parts = []
    every = len(rest) == 0 and (len(up) == 0 or len(down) == 0)
    for word, g in (("rose", up), ("fell", down)):
        if len(g):
            lo, hi = g[est].min(), g[est].max()
            size = f"Δ {_signed(lo)}" if len(g) == 1 else f"Δ {_signed(lo)} to {_signed(hi)}"
            pmax = g[p].max()
            pw = f"p_Holm {fmt_p(pmax)}" if len(g) == 1 else f"p_Holm ≤ {fmt_p(pmax).replace('< ', '')}"
            where = f"all {len(t)} layers" if every and len(t) > 1 else _layers(g["layer"])
            parts.append(f"{metric} {word} in {where} ({size}, {pw})")
    if not parts:
        return f"no layer's {metric} changed detectably (p_Holm ≥ {alpha:g} in every layer)"
    text = " and ".join(parts) if len(parts) == 2 and len(rest) == 0 else "; ".join(parts)
    if len(rest):
        text += f"; no detectable change in {_layers(rest['layer'])}"
    return text


def _shape(shape: pd.DataFrame | None, contrasts: pd.DataFrame | None, alpha: float) -> str | None:
    if shape is None or not len(shape):
        return None
    sf = shape[shape["test"].str.startswith("sign-flip")].iloc[0]
    p = sf["p"]
    if p < alpha:
        text = f"The change differs across layers (profile-shape sign-flip p {'= ' if not fmt_p(p).startswith('<') else ''}{fmt_p(p)})"
        if contrasts is not None and len(contrasts):
            c = contrasts.loc[contrasts["mean_diff"].abs().idxmax()]
            text += (f"; the largest contrast is {c['contrast']} = {_signed(c['mean_diff'])} "
                     f"[{_signed(c['ci_low'])}, {_signed(c['ci_high'])}]")
        return text + "."
    return f"The change is consistent with a uniform shift across layers (profile-shape sign-flip p = {fmt_p(p)})."


def _mechanics(init_final: pd.DataFrame | None) -> str | None:
    if init_final is None or not len(init_final):
        return None
    s0 = int(init_final["step_init"].iloc[0])
    shares = init_final["share_at_init"]
    changed = init_final[init_final["p_holm"] < ALPHA]
    text = (f"Already at step {s0} the difference was {100 * shares.min():.0f}–{100 * shares.max():.0f}% of its final "
            "size in every layer: most of it is what the bias does to near-initial weights")
    if len(changed):
        grew = changed[changed["mean_diff"] > 0]["layer"]
        shrank = changed[changed["mean_diff"] < 0]["layer"]
        bits = ([f"increased it in {_layers(grew)}"] if len(grew) else []) + \
            ([f"reduced it in {_layers(shrank)}"] if len(shrank) else [])
        text += "; training " + " and ".join(bits)
    else:
        text += "; training did not change it detectably"
    return text + "."


def _confounds(assoc: pd.DataFrame | None, adjusted: pd.DataFrame | None = None) -> str | None:
    if assoc is None or not len(assoc):
        return None
    bad = assoc[(assoc["rho"].abs() >= RHO_CONFOUND) & ((assoc["ci_low"] > 0) | (assoc["ci_high"] < 0))]
    if not len(bad):
        return None
    r = bad.loc[bad["rho"].abs().idxmax()]
    rho = lambda x: fmt_num(x, 2).replace("-", "−")  # noqa: E731
    span = rho(r["rho"]) if len(bad) == 1 else f"{rho(bad['rho'].min())} to {rho(bad['rho'].max())}"
    # both models see the same examples, so length does not confound the paired Δ: it modifies its size,
    # and the mean Δ depends on the sample's lengths
    text = (f"The effect depends on length: the per-example Δ correlates with evaluated length (Spearman ρ {span} "
            f"in {_layers(bad['layer'])}, where |ρ| ≥ {RHO_CONFOUND:g} and the CI excludes 0), so the mean Δ "
            "depends on this sample's lengths")
    if adjusted is not None and len(adjusted):
        a = adjusted[adjusted["layer"].isin(bad["layer"])]
        slope = a["slope_per_10"]
        text += (f"; at the median length ({a['reference_length'].iloc[0]:g} tokens) Δ is "
                 f"{_signed_span(a['delta_at_reference'])}, and it changes by {_signed_span(slope)} per 10 tokens")
    return text + "; see the length tables."


def pair_headline(effects: pd.DataFrame, n_examples: int, shape=None, contrasts=None, init_final=None, assoc=None,
                  alpha: float = ALPHA, within_study: bool = False, length_adjusted=None,
                  pretrained: bool = False) -> list[str]:
    """The headline of a one-pair report (a part of a study says it is within one seed; a pretrained
    pair, an intervention at inference on one checkpoint, says so)."""
    lead = (f"On this pretrained checkpoint ({n_examples} examples, the intervention applied at inference only)"
            if pretrained else f"Within one initialisation ({n_examples} examples)")
    out = [f"{lead}, {direction_sentence(effects.reset_index(drop=True), 'mean_diff', 'p_holm', alpha)}."]
    for s in (_shape(shape, contrasts, alpha), _mechanics(init_final)):
        if s:
            out.append(s)
    if pretrained:
        out.append("These p-values measure precision over these examples (examples as the unit) for this one "
                   "checkpoint and data set; other checkpoints or data need their own runs.")
    else:
        out.append("These p-values measure precision within one model (examples as the unit), not the effect of the "
                   "architecture across initialisations" + (": the study's across-seed results above are that "
                                                             "evidence." if within_study else
                                                             "; that needs several seeds."))
    c = _confounds(assoc, length_adjusted)
    if c:
        out.append(c)
    return out


def _split(decomp: pd.DataFrame | None) -> str | None:
    """The direct/learned split of a bias-off evaluation (METHODS 3.4b)."""
    if decomp is None or not len(decomp):
        return None
    w = decomp.groupby(["component", "layer"])["mean_diff"].mean().unstack("component")
    span = lambda c: f"{_signed(w[c].min())} to {_signed(w[c].max())}"  # noqa: E731
    return (f"With the bias switched off on the trained weights, the total Δ ({span('total')} across layers) splits "
            f"into a direct part, what the bias does to those weights ({span('direct')}), and a learned part, what "
            f"training changed ({span('learned')}).")


def study_headline(across: pd.DataFrame | None, n_pairs: int, seeds: list, alpha: float = ALPHA,
                   decomposition: pd.DataFrame | None = None) -> list[str]:
    """The headline of a study report: the across-seed result first (seed as the unit)."""
    if across is None or not len(across):
        out = [f"{n_pairs} pairs over seeds {', '.join(map(str, seeds))}, but fewer than two seeds of the standard "
               "SAAB pair: no across-seed inference is possible, so every result below is within one initialisation."]
        split = _split(decomposition)
        return out + ([split] if split else [])
    k = int(across["n_seeds"].max())
    t = across.copy()
    text = direction_sentence(t, "mean_delta", "p_t_holm", alpha)
    out = [f"Across {k} seeds (seed as the unit; paired t, Holm over layers), {text}."]
    sig = t["p_t_holm"] < alpha
    d = t["mean_delta"]
    if (~sig).any() and ((d > 0).all() or (d < 0).all()):  # "no detectable change" is not "no change"
        out.append(f"Every layer's mean Δ has the same sign ({_signed_span(d)}); with {k} seeds, {int(sig.sum())} "
                   f"of {len(t)} layers stay significant after Holm.")
    floor = float(across["min_attainable_p"].min())
    if floor > alpha:
        out.append(f"With {k} seeds the exact sign-flip test cannot reach p < {alpha:g} (smallest attainable p = "
                   f"{fmt_p(floor)}); the t-test leans on normality of the per-seed Δ.")
    split = _split(decomposition)
    if split:
        out.append(split)
    out.append("Per-pair results further down are within one seed each: they measure precision within one model, "
               "not variation between initialisations.")
    return out
