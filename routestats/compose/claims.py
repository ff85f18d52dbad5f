"""The sentences of pair and study reports as :class:`~routestats.report.Claim` s (METHODS 3.7).

Every sentence is built from the finished tables of a report, with the preconditions that license
it, so that the words never disagree with the interval printed beside them:

* **one decision rule per family.** A layer "rose" or "fell" when its Holm-adjusted p is below
  alpha *and* its interval excludes 0 on that side. Intervals are per layer (not adjusted for
  multiplicity; the tables say so): a layer whose interval excludes 0 while its Holm-adjusted p does
  not reach alpha is said to be exactly that, and a layer whose interval includes 0 is said to
  include 0 -- never "no change";
* **mechanism only from the design that shows it:** the share of the final difference present at
  the earliest step is a number; what the bias does mechanically is stated only from a bias-off
  evaluation, and otherwise the sentence says which run would show it;
* **censoring stated:** examples cut at the cap are counted; the length association is named only
  when it has one sign over the layers where it is strong (|rho| >= ``length_rho``, interval
  excluding 0), as an association, with the examples it rests on;
* **p-values never below what the test can reach:** :func:`routestats.report.fmt_p`, and "the
  smallest attainable" where every value sits at the permutation floor.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.report import Claim, Report, fmt_ci, fmt_num, fmt_p

__all__ = ["layers_phrase", "direction_claim", "pair_claims", "study_claims", "signed"]


def layers_phrase(xs) -> str:
    """'layer 2', 'layers 0 and 3', 'layers 0–3', 'layers 0–2, 5 and 7'.

    >>> layers_phrase([3]), layers_phrase([0, 3]), layers_phrase([0, 1, 2, 3]), layers_phrase([0, 1, 2, 5, 7])
    ('layer 3', 'layers 0 and 3', 'layers 0–3', 'layers 0–2, 5 and 7')
    """
    xs = sorted(int(x) for x in xs)
    runs, start = [], xs[0]
    for a, b in zip(xs, xs[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}–{a}" if a - start >= 2 else f"{start}, {a}")
            start = b
    parts = ", ".join(runs).split(", ")
    word = "layer " if len(xs) == 1 else "layers "
    return word + (parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1])


def signed(x: float, digits: int = 3) -> str:
    """A signed number as the sentences print it; one that rounds to zero has no sign.

    >>> signed(0.1234), signed(-0.05), signed(-0.00001)
    ('+0.123', '−0.050', '0.000')
    """
    text = fmt_num(abs(x), digits)
    if float(text) == 0:
        return text
    return ("+" if x >= 0 else "−") + text


def _span_r(r) -> str:
    lo, hi = f"{r.min():.2f}".replace("-", "−"), f"{r.max():.2f}".replace("-", "−")
    return lo if lo == hi else f"{lo} to {hi}"


def _span(values) -> str:
    lo, hi = signed(min(values)), signed(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def _p_max(ps, floor: float | None) -> str:
    pmax = float(np.max(ps))
    if floor is not None and pmax <= floor * (1 + 1e-9):
        return f"p_Holm = {float(f'{pmax:.2g}'):g}{' in each' if len(ps) > 1 else ''}, the smallest attainable"
    text = fmt_p(pmax)
    return f"p_Holm {text}" if text.startswith("<") else f"p_Holm {'= ' if len(ps) == 1 else '≤ '}{text}"


def _eq(p) -> str:
    """'= 0.012' or '< 0.001': a p-value after its name."""
    text = fmt_p(p)
    return text if text.startswith("<") else f"= {text}"


def _ci(lo, hi) -> str:
    """An interval with typographic minus signs, as the signed numbers beside it."""
    return fmt_ci(lo, hi).replace("-", "−")


def direction_claim(t: pd.DataFrame, lead: str, *, est: str, p: str, lo: str, hi: str, alpha: float, metric: str,
                    table: str, conf: str, where: str = "headline", floor: float | None = None,
                    family: str = "Holm over layers") -> Claim:
    """The answer over a family of layers: which rose or fell (p < alpha and the interval on that side
    of 0), which have an interval excluding 0 without reaching alpha after Holm, and which include 0.

    >>> t = pd.DataFrame({"layer": [0, 1, 2], "d": [0.12, 0.03, 0.01], "p": [0.001, 0.2, 0.6],
    ...                   "lo": [0.05, 0.01, -0.02], "hi": [0.2, 0.06, 0.03]})
    >>> direction_claim(t, "Within one initialisation (8 examples)", est="d", p="p", lo="lo", hi="hi", alpha=0.05,
    ...                 metric="SFM", table="effects", conf="95%").sentence
    'Within one initialisation (8 examples), SFM rose in layer 0 (Δ +0.120, p_Holm = 0.0010); in layer 1 the per-layer 95% interval [0.010, 0.060] excludes 0 but p_Holm = 0.200 (Holm over layers); in layer 2 the 95% interval [−0.020, 0.030] includes 0.'
    """
    t = t.sort_values("layer")
    up = t[(t[p] < alpha) & (t[lo] > 0)]
    down = t[(t[p] < alpha) & (t[hi] < 0)]
    decided = set(up["layer"]) | set(down["layer"])
    rest = t[~t["layer"].isin(decided)]
    excl = rest[(rest[lo] > 0) | (rest[hi] < 0)]
    incl = rest[~rest["layer"].isin(set(excl["layer"]))]
    parts = []
    for word, g in (("rose", up), ("fell", down)):
        if len(g):
            where_ = f"all {len(t)} layers" if len(g) == len(t) and len(t) > 1 else layers_phrase(g["layer"])
            parts.append(f"{metric} {word} in {where_} (Δ {_span(g[est])}, {_p_max(g[p].to_numpy(), floor)})")
    text = "; ".join(parts) if parts else f"no layer's {metric} change reaches p_Holm < {alpha:g}"
    for r in excl.itertuples():
        text += (f"; in layer {r.layer} the per-layer {conf} interval {_ci(getattr(r, lo), getattr(r, hi))} "
                 f"excludes 0 but p_Holm {_eq(getattr(r, p))} ({family})")
    if len(incl) == 1:
        r = incl.iloc[0]
        text += f"; in layer {int(r['layer'])} the {conf} interval {_ci(r[lo], r[hi])} includes 0"
    elif len(incl):
        w = incl.assign(width=incl[hi] - incl[lo]).sort_values("width").iloc[-1]
        text += (f"; in {layers_phrase(incl['layer'])} the {conf} intervals include 0 (the widest "
                 f"{_ci(w[lo], w[hi])}, layer {int(w['layer'])})")
    kind = "rose" if len(up) and not len(down) else "fell" if len(down) and not len(up) else \
        "mixed" if parts else "no_evidence"
    checks = (("rose: p_holm < alpha and ci_low > 0", bool(((up[p] < alpha) & (up[lo] > 0)).all())),
              ("fell: p_holm < alpha and ci_high < 0", bool(((down[p] < alpha) & (down[hi] < 0)).all())),
              ("every other layer's interval is described as it is", len(excl) + len(incl) == len(rest)))
    return Claim(kind, f"{lead}, {text}.", where, table, tuple(int(x) for x in t["layer"]), "layer", checks)


def _frame(rep: Report, name: str):
    return rep.frame(name) if name in rep.tables() else None


# ------------------------------------------------------------------ pair
def _shape_claim(shape, contrasts, alpha: float, conf: str) -> Claim | None:
    if shape is None or not len(shape):
        return None
    sf = shape[shape["test"].str.startswith("sign-flip")].iloc[0]
    pv = float(sf["p"])
    if pv >= alpha:
        return Claim("no_evidence_shape", f"The data do not show that the change differs across layers (profile-shape "
                     f"sign-flip p {_eq(pv)}; a uniform shift is not ruled out).", "headline", "profile_shape",
                     (str(sf["test"]),), "test", (("p >= alpha", True),))
    text = f"The change differs across layers (profile-shape sign-flip p {_eq(pv)})"
    rows: tuple = (str(sf["test"]),)
    if contrasts is not None and len(contrasts):
        c = contrasts.loc[contrasts["mean_diff"].abs().idxmax()]
        inside = c["ci_low"] <= 0 <= c["ci_high"]
        text += (f"; the largest contrast is {c['contrast']} = {signed(c['mean_diff'])}, per-contrast {conf} "
                 f"interval {_ci(c['ci_low'], c['ci_high'])}" + (" (it includes 0)" if inside else ""))
    return Claim("differs_across_layers", text + ".", "headline", "profile_shape", rows, "test", (("p < alpha", True),))


def direct_learned_claim(decomp: pd.DataFrame) -> Claim:
    """The split of the total Δ into what the bias does to the trained weights and what training changed,
    from a bias-off evaluation (METHODS 3.4b; the one design that shows the mechanism)."""
    w = decomp.groupby(["component", "layer"])["mean_diff"].mean().unstack("component")
    sp = lambda c: f"{signed(w[c].min())} to {signed(w[c].max())}"  # noqa: E731
    return Claim("direct_learned", f"With the bias switched off on the trained weights, the total Δ "
                 f"({sp('total')} across layers) splits into a direct part, what the bias does to those weights "
                 f"({sp('direct')}), and a learned part, what training changed ({sp('learned')}).", "headline",
                 "decomposition", checks=(("a bias-off evaluation exists", True),))


def _early_claims(init: pd.DataFrame | None, alpha: float, has_bias_off: bool) -> list[Claim]:
    """The share of the final difference already present at the earliest stored step, as numbers, and
    what would show the mechanism (METHODS 3.4)."""
    if init is None or not len(init):
        return []
    s0 = int(init["step_init"].iloc[0])
    share = init["share_at_init"]
    pct = lambda x: f"{100 * x:.0f}%"  # noqa: E731
    if ((share >= 0) & (share <= 1)).all():
        text = f"At step {s0}, the earliest stored step, the difference was already {pct(share.min())}–" \
               f"{pct(share.max())} of its final size in every layer"
    else:
        out = init[(share < 0) | (share > 1)]
        text = (f"At step {s0}, the earliest stored step, the difference ranged from {pct(share.min())} to "
                f"{pct(share.max())} of its final size (outside 0–100% in {layers_phrase(out['layer'])}: "
                "there the early difference is larger than, or opposite to, the final one)")
    grew = init[(init["p_holm"] < alpha) & (init["ci_low"] > 0)]
    shrank = init[(init["p_holm"] < alpha) & (init["ci_high"] < 0)]
    bits = ([f"grew in {layers_phrase(grew['layer'])}"] if len(grew) else []) + \
        ([f"shrank in {layers_phrase(shrank['layer'])}"] if len(shrank) else [])
    text += ("; from then to the end it " + " and ".join(bits) + " (p_Holm < " + f"{alpha:g})") if bits else \
        "; the change from then to the end reaches p_Holm < " + f"{alpha:g} in no layer"
    out = [Claim("early_share", text + ".", "headline", "init_vs_final", tuple(int(x) for x in init["layer"]),
                 checks=(("shares computed on the same examples at both steps", True),))]
    if not has_bias_off:
        out.append(Claim("needs_bias_off", "Whether an early difference is what the bias does to near-initial weights "
                         "or what training learned is not shown by this design: an evaluation of the trained SAAB "
                         "weights with the bias removed (python -m runners evaluate RUN --bias off) would split it.",
                         "finding", "init_vs_final", checks=(("no bias-off evaluation in the input", True),)))
    return out


def _length_claims(assoc, adjusted, cens: dict | None, rho: float, alpha: float) -> list[Claim]:
    out = []
    if cens and cens["n_capped"]:
        k, n = cens["n_capped"], cens["n"]
        left_out = assoc is not None and len(assoc) and assoc["capped"].iloc[0] == "exclude"
        out.append(Claim("censoring", f"{k} of {n} examples ({100 * k / n:.0f}%) reached the {cens['cap']}-token cap, "
                         "so their true lengths are unknown (at least the cap)" + (
                             "; the length analyses leave them out" if left_out else "") + ".",
                         "finding", "lengths", checks=(("examples cut at the cap", k > 0),)))
    if assoc is None or not len(assoc):
        return out
    strong = assoc[(assoc["rho"].abs() >= rho) & ((assoc["ci_low"] > 0) | (assoc["ci_high"] < 0))]
    if not len(strong):
        return out
    n = int(assoc["n"].iloc[0])
    r2 = lambda x: fmt_num(x, 2).replace("-", "−")  # noqa: E731
    span = r2(strong["rho"].iloc[0]) if len(strong) == 1 else f"{r2(strong['rho'].min())} to {r2(strong['rho'].max())}"
    one_sign = bool((strong["rho"] > 0).all() or (strong["rho"] < 0).all())
    if not one_sign:
        out.append(Claim("length_mixed", f"The association of the per-example Δ with evaluated length changes sign "
                         f"across layers (Spearman ρ {span} in {layers_phrase(strong['layer'])}), so no length "
                         "dependence is claimed.", "finding", "length_association",
                         tuple(int(x) for x in strong["layer"]), checks=(("signs differ across those layers", True),)))
        return out
    text = (f"In {layers_phrase(strong['layer'])} ({len(strong)} of {len(assoc)} layers) the per-example Δ is "
            f"associated with evaluated length (Spearman ρ {span}, per-layer interval excluding 0, on {n} examples"
            + (f" below the cap; {int(assoc['n_capped'].iloc[0])} at the cap are left out"
               if assoc["capped"].iloc[0] == "exclude" and assoc["n_capped"].iloc[0] else "")
            + "), so the mean Δ depends on this sample's lengths; an association, not an effect of length")
    if adjusted is not None and len(adjusted):
        a = adjusted[adjusted["layer"].isin(strong["layer"])]
        text += (f"; at the median length of those examples ({a['reference_length'].iloc[0]:g} tokens) Δ is "
                 f"{_span(a['delta_at_reference'])}, changing by {_span(a['slope_per_10'])} per 10 tokens")
    out.append(Claim("depends_on_length", text + ".", "headline", "length_association",
                     tuple(int(x) for x in strong["layer"]),
                     checks=((f"|rho| >= {rho:g} and interval excluding 0", True), ("one sign over those layers", one_sign),
                             ("at least 8 examples", n >= 8))))
    return out


def _unnamed_claim(masses) -> Claim | None:
    """When mass on keys outside the named fields moves, the named-key change beside the raw one."""
    if masses is None or not len(masses) or "role" not in masses:
        return None
    m = masses.set_index(["role", "layer"])
    b, v = m.loc["baseline"], m.loc["variant"]
    dU = v["unnamed_mass"] - b["unnamed_mass"]
    if not (dU.abs() > 0.01).any():
        return None
    layer = int(dU.abs().idxmax())
    d_raw = float(v.loc[layer, "sfm"] - b.loc[layer, "sfm"])
    d_named = float(v.loc[layer, "sfm_named"] - b.loc[layer, "sfm_named"])
    du = float(dU.loc[layer])
    text = (f"Part of the raw SFM change is attention moving to or from keys outside the named fields (special "
            f"tokens, separators, the first token): in layer {layer} raw SFM changed by {signed(d_raw)} while SFM over "
            f"the named keys changed by {signed(d_named)}, and the mass on unnamed keys by {signed(du)}")
    # S = (1 - U) * S_named per query: at the baseline's named-key SFM, mass leaving (entering) the unnamed keys
    # adds -dU * S_named to SFM -- an accounting of the layer means, said as "about"
    part = -du * float(b.loc[layer, "sfm_named"])
    share = part / d_raw if abs(d_raw) > 0.005 else float("nan")
    if share > 0:
        text += (f"; at the baseline's named-key SFM ({fmt_num(b.loc[layer, 'sfm_named'])}) that mass alone comes to "
                 f"about {signed(part)}, {100 * share:.0f}% of the raw change")
    return Claim("unnamed_shift", text + ".", "headline", "masses", (layer,),
                 checks=(("|change of unnamed mass| > 0.01", True),))


SINK = 0.3  # a layer whose first key holds this share of the attention has an attention sink worth saying


def _sink_claim(masses, first_fields: dict, n_examples: int) -> Claim | None:
    """When the first token holds much of a layer's attention (an attention sink) and is a named token, its mass
    counts as same-field for its own field's queries and as cross-field for the others': say so, with where."""
    if masses is None or not len(masses) or "first_mass" not in masses or not first_fields:
        return None
    top = masses.loc[masses["first_mass"].idxmax()]
    field, count = max(first_fields.items(), key=lambda kv: kv[1])
    if float(top["first_mass"]) < SINK or count * 2 < n_examples:
        return None
    return Claim("first_key_sink", f"The first token takes up to {100 * float(top['first_mass']):.0f}% of a layer's "
                 f"attention (layer {int(top['layer'])}, {top['role']}; an attention sink). It is a token of the "
                 f"{field} field in {count} of {n_examples} examples, so for every query outside the {field} field "
                 "that mass counts as cross-field; the first-key column of the mass table shows it per layer.",
                 "headline", "masses", (int(top["layer"]),),
                 checks=((f"first-key mass >= {SINK:g}", True), ("the first token is named in most examples", True)))


def pair_claims(rep: Report, *, n_examples: int, alpha: float, rho: float, conf: str, pretrained: bool,
                within_study: bool, permutations: int, censored: dict | None, has_bias_off: bool = False) -> list[Claim]:
    """Headline and findings of a one-pair report, from its finished tables."""
    eff = rep.frame("effects")
    n_layers = len(eff)
    lead = (f"On this pretrained checkpoint ({n_examples} examples, the intervention applied at inference only)"
            if pretrained else f"Within one initialisation ({n_examples} examples)")
    floor = n_layers / (permutations + 1)
    claims = [direction_claim(eff.rename(columns={"mean_diff": "d"}), lead, est="d", p="p_holm", lo="ci_low",
                              hi="ci_high", alpha=alpha, metric="SFM", table="effects", conf=conf, floor=floor,
                              family=f"Holm over {n_layers} layers")]
    u = _unnamed_claim(_frame(rep, "masses"))
    sink = _sink_claim(_frame(rep, "masses"), (rep.facts or {}).get("first_key_fields") or {}, n_examples)
    for c in (_shape_claim(_frame(rep, "profile_shape"), _frame(rep, "layer_contrasts"), alpha, conf), u, sink):
        if c is not None:
            claims.append(c)
    claims += _early_claims(_frame(rep, "init_vs_final"), alpha, has_bias_off)
    decomp = _frame(rep, "decomposition")
    if decomp is not None and len(decomp):
        claims.append(direct_learned_claim(decomp))
    scope = ("These p-values measure precision over these examples (examples as the unit) for this one checkpoint "
             "and data set; other checkpoints or data need their own runs." if pretrained else
             "These p-values measure precision within one model (examples as the unit), not the effect of the "
             "architecture across initialisations" + (": the study's across-seed results above are that evidence."
                                                       if within_study else "; that needs several seeds."))
    claims.append(Claim("scope", scope, "headline", checks=(("examples are the unit", True),)))
    claims += _length_claims(_frame(rep, "length_association"), _frame(rep, "length_adjusted"), censored, rho, alpha)
    claims += _pair_findings(rep, conf)
    return claims


MAX_LAYER_FINDINGS = 12  # beyond, the findings quote the largest and smallest change and point at the table


def _pair_findings(rep: Report, conf: str) -> list[Claim]:
    out = []
    eff = rep.frame("effects").sort_values("layer")
    rows = eff
    if len(eff) > MAX_LAYER_FINDINGS:  # 30 lines of one shape bury the rest: the extremes, then the table
        order = eff["mean_diff"].to_numpy().argsort(kind="stable")
        rows = eff.iloc[sorted({int(order[-1]), int(order[0])})]
        out.append(Claim("layers_listed", f"Per layer, for all {len(eff)} layers: the effects table; below, the layers "
                         "with the largest and the smallest Δ.", "finding", "effects",
                         checks=((f"more than {MAX_LAYER_FINDINGS} layers", True),)))
    for r in rows.itertuples():
        out.append(Claim("layer_effect", f"Layer {r.layer}: SFM {fmt_num(r.baseline_mean)} → {fmt_num(r.variant_mean)}, "
                         f"Δ = {signed(r.mean_diff)}, per-layer {conf} CI {_ci(r.ci_low, r.ci_high)}, d_z = "
                         f"{fmt_num(r.dz, 2)}, p_Holm {_eq(r.p_holm)}.",
                         "finding", "effects", (int(r.layer),), checks=(("quotes the table", True),)))
    lay = rep.frame("layers")
    for role in ("baseline", "variant"):
        t = lay[(lay["role"] == role) & lay["is_max_sfm"]]
        if len(t):
            out.append(Claim("highest_layer", f"Highest SFM in the {role}: layer {int(t['layer'].iloc[0])} "
                             f"({fmt_num(t['sfm'].iloc[0])}).", "finding", "layers", (int(t["layer"].iloc[0]),)))
    out.append(Claim("profile_distance", f"Profile distance between the two layer profiles: "
                     f"{fmt_num(rep.facts['profile_distance'], 4)}.", "finding", "profile_distance"))
    adj = _frame(rep, "adjusted")
    if adj is not None:
        out.append(Claim("adjusted_counts", f"Opportunity-adjusted analysis: {int(adj['n'].iloc[0])} examples, "
                         f"{int(adj['excluded'].iloc[0])} excluded (one visible field), mean O_e "
                         f"{fmt_num(adj['mean_opportunity'].iloc[0])}.", "finding", "adjusted"))
    return out


# ------------------------------------------------------------------ study
def study_claims(rep: Report, *, n_pairs: int, seeds: list, alpha: float, conf: str, has_parts: bool) -> list[Claim]:
    """Headline and findings of a study report, from its finished tables (seed as the unit)."""
    across, decomp = _frame(rep, "across_seeds"), _frame(rep, "decomposition")
    out = []
    if across is None or not len(across):
        out.append(Claim("no_across_seed", f"{n_pairs} pairs over seeds {', '.join(map(str, seeds))}, but fewer than "
                         "two seeds of the standard SAAB pair: no across-seed inference is possible, so every result "
                         "below is within one initialisation.", "headline", checks=(("fewer than 2 seeds", True),)))
    else:
        k = int(across["n_seeds"].max())
        lead = f"Across {k} seeds (seed as the unit; paired t, Holm over layers)"
        out.append(direction_claim(across.rename(columns={"mean_delta": "d"}), lead, est="d", p="p_t_holm",
                                   lo="ci_low_t", hi="ci_high_t", alpha=alpha, metric="SFM", table="across_seeds",
                                   conf=conf, family=f"Holm over {len(across)} layers"))
        d = across["mean_delta"]
        sig = (across["p_t_holm"] < alpha)
        if (~sig).any() and ((d > 0).all() or (d < 0).all()):
            out.append(Claim("same_sign", f"Every layer's mean Δ has the same sign ({_span(d)}); with {k} seeds, "
                             f"{int(sig.sum())} of {len(across)} layers reach p_Holm < {alpha:g}.", "headline",
                             "across_seeds", tuple(int(x) for x in across["layer"]),
                             checks=(("one sign", True), ("some layer does not reach alpha", True))))
        floor = float(across["min_attainable_p"].min())
        if floor > alpha:
            out.append(Claim("signflip_floor", f"With {k} seeds the exact sign-flip test cannot reach p < {alpha:g} "
                             f"(smallest attainable p = {fmt_p(floor)}); the t-test leans on normality of the per-seed "
                             "Δ.", "headline", "across_seeds", checks=(("min attainable p > alpha", True),)))
    if decomp is not None and len(decomp):
        out.append(direct_learned_claim(decomp))
    if has_parts:
        out.append(Claim("parts_scope", "The per-pair parts after this report are within one seed each: they measure "
                         "precision within one model, not variation between initialisations.", "headline",
                         checks=(("the report has per-pair parts", True),)))
    out += _study_findings(rep, seeds, alpha)
    shared = _frame(rep, "shared_examples")
    if shared is not None and len(shared):
        r = shared["mean_r"]
        out.append(Claim("shared_examples", f"All seeds were evaluated on the same {int(shared['n_examples'].max())} "
                         "examples, so seeds and examples are crossed, while the two-stage bootstrap and the mixed model "
                         "treat each seed's examples as its own" + (
                             f"; the per-example Δ correlates across seeds (mean Pearson r {_span_r(r)} over layers), so "
                             "those two understate the uncertainty from the choice of examples" if (r > 0.1).any() else
                             f"; the per-example Δ hardly correlates across seeds (mean Pearson r {_span_r(r)} over "
                             "layers), so this matters little here") + ". The paired t across seeds does not depend on it.",
                         "finding", "shared_examples", tuple(int(x) for x in shared["layer"]),
                         checks=(("every seed holds the same example ids", True), ("r is finite", bool(r.notna().any())))))
    return out


def _study_findings(rep: Report, seeds: list, alpha: float) -> list[Claim]:
    out = [Claim("counts", f"{rep.facts['n_runs']} runs, seeds {', '.join(map(str, seeds))}.", "finding")]
    st = _frame(rep, "seeds")
    if st is not None:
        counts = st["pattern"].value_counts()
        n = int(counts.sum())
        out.append(Claim("patterns", "Seed-table patterns (the documented rules of routestats.settings.PatternRules): "
                         + "; ".join(f"“{k}” in {v} of {n} seeds" for k, v in counts.items()) + ".", "finding",
                         "seeds"))
    a = _frame(rep, "across_seeds")
    if a is not None:
        for r in a.itertuples():
            where = f"{r.dataset}, " if a["dataset"].nunique() > 1 else ""
            out.append(Claim("seed_layer", f"{where}Layer {r.layer}: mean Δ over {r.n_seeds} seeds {fmt_num(r.mean_delta)} "
                             f"(SD {fmt_num(r.sd_delta)}), per-layer {rep_conf(rep)} t interval "
                             f"{_ci(r.ci_low_t, r.ci_high_t)}, paired t p_Holm {_eq(r.p_t_holm)}, exact "
                             f"sign-flip p_Holm {_eq(r.p_signflip_holm)} (smallest attainable "
                             f"{fmt_p(r.min_attainable_p)}).", "finding", "across_seeds", (int(r.layer),)))
    vc = _frame(rep, "variance_components")
    if vc is not None and "converged" in vc and not vc["converged"].all():
        bad = vc[~vc["converged"]]
        out.append(Claim("mixed_not_converged", f"The mixed model did not converge in {layers_phrase(bad['layer'])}: "
                         "its estimates there are not quoted.", "finding", "variance_components",
                         tuple(int(x) for x in bad["layer"]), checks=(("a fit did not converge", True),)))
    return out


def rep_conf(rep: Report) -> str:
    conf = rep.facts.get("confidence", 0.95)
    return f"{100 * conf:.0f}%"
