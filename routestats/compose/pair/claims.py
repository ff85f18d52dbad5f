"""The claims of the pair report, one builder per section, each over the frames that section holds.

Every builder takes the finished frames of its own section (never another section's table by name)
and the typed facts of the :class:`~routestats.compose.pair.context.PairContext`, and returns
:class:`~routestats.claim.Claim` s whose preconditions (:class:`~routestats.claim.Check`) are
computed from the rows they cite. :data:`CLAIM_ORDER` ranks them for the headline and findings.
"""

from __future__ import annotations

import pandas as pd

from routestats.compose.claims import (ci_text, direction_claim, layers_phrase, missed_change_claims, p_after,
                                       rows_of, signed, span)
from routestats.claim import Check, Claim, verdicts
from routestats.report import at_floor, at_printed_floor, floor_text, fmt_num, fmt_p
from routestats.stats.inference import SMALL_N, percentile_coverage, signflip_floor

__all__ = ["CLAIM_ORDER", "SINK", "MAX_LAYER_FINDINGS", "LENGTH_MIN_N", "shape_claims", "unnamed_claims",
           "sink_claims", "early_claims", "scope_claim", "censoring_claims", "small_sample_claims", "length_claims",
           "length_adjusted_claim", "length_not_claimed", "effects_claims", "effect_findings", "distance_claims",
           "adjusted_claims"]

# headline and findings in this rank (a kind not listed follows in section order)
CLAIM_ORDER = ("rose", "fell", "mixed", "no_evidence", "pair_floor", "missed_change", "small_sample_intervals", "no_evidence_shape", "differs_across_layers", "largest_contrast", "unnamed_shift",
               "first_key_sink", "learned_sink", "early_share", "needs_bias_off", "direct_learned", "scope", "censoring",
               "depends_on_length", "length_adjusted", "length_not_claimed",
               "layers_listed", "layer_effect", "highest_layer", "highest_tie",
               "profile_distance", "adjusted_counts")

SINK = 0.3  # a layer whose first key holds this share of the attention has an attention sink worth saying
MAX_LAYER_FINDINGS = 12  # beyond, the findings quote the largest and smallest change and point at the table
LENGTH_MIN_N = 8  # the fewest examples a length sentence is said from (docs/methods.md, length association)


def _early_share(init: pd.DataFrame, alpha: float) -> tuple[list[tuple[str, tuple[Check, ...]]], pd.Series, tuple]:
    """The sentence's first part, in both wordings with the checks that choose between them: the stated shares
    (``share_at_init`` where it is not empty) with their intervals, the layers whose interval lies beyond 0-100 %
    named as such; or that no share is stated. Also which rows it calls beyond (the ``beyond`` column of the
    claim's evidence), chosen by their verdicts (returned third). A share outside 0-100 % whose interval reaches into
    that range is noise around it ("100.3 %" of a share planted at 100 %) and is not called beyond."""
    s0 = int(init["step_init"].iloc[0])
    stated = init[init["share_at_init"].notna()]
    share = stated["share_at_init"]
    pct = lambda x: f"{100 * x:.0f}%"  # noqa: E731
    words, gates = verdicts(init, {
        "beyond 0–100%": Check("beyond 0–100% only where the interval excludes that range",
                               "share_ci_high < 0 or share_ci_low > 1"),
        "not beyond": Check("every layer whose interval excludes 0–100% is named",
                            "not (share_ci_high < 0 or share_ci_low > 1)")}, "the early share", "init_vs_final")
    beyond = pd.Series([w == "beyond 0–100%" for w in words], index=init.index)
    checks = (Check("some share is stated", "share_at_init == share_at_init", every="any"),
              Check("a share is stated only with its interval", "share_ci_low == share_ci_low and "
                    "share_ci_high == share_ci_high", "share_at_init == share_at_init"))
    none = (f"At step {s0}, the earliest stored step, Δ is distinguishable from 0 at both that step and the end "
            f"(p_Holm < {alpha:.3g}) in no layer, so no share of the final difference is stated",
            (Check("no share stated", "share_at_init != share_at_init"),))
    if not len(stated):  # the stated wording has no numbers to print: built with none, its first check withholds it
        return [none, (f"At step {s0}, the earliest stored step, no share is stated", checks)], beyond, gates
    where = "in every layer" if len(stated) == len(init) else f"in {layers_phrase(stated['layer'])}"
    span = f"{pct(share.min())}" if share.min() == share.max() else f"{pct(share.min())} to {pct(share.max())}"
    text = (f"At step {s0}, the earliest stored step, the difference was {span} of its final size {where} (per-layer "
            f"intervals from {pct(stated['share_ci_low'].min())} to {pct(stated['share_ci_high'].max())})")
    out = init[beyond]
    if len(out):
        text += (f"; beyond 0–100% in {layers_phrase(out['layer'])}, whose interval excludes that range: there the "
                 "early difference is larger than, or opposite to, the final one")
    return [none, (text, checks)], beyond, gates


def shape_claims(shape: pd.DataFrame, contrasts: pd.DataFrame | None, alpha: float, conf: str) -> list[Claim]:
    """Whether the change differs across layers (profile-shape sign-flip test), with the largest contrast."""
    if shape is None or not len(shape):
        return []
    sf_rows = shape[shape["test"].str.startswith("sign-flip")]
    sf = sf_rows.iloc[0]
    pv = float(sf["p"])
    rows: tuple = (str(sf["test"]),)
    floor = float(sf["p_floor"]) if "p_floor" in sf and pd.notna(sf["p_floor"]) else None
    # both wordings are built; their checks, not an if beside them, choose the one that prints
    said, n = f"p {p_after(pv)}", int(sf["n"]) if "n" in sf else None
    if at_floor(pv, floor):  # the floor as every place prints it, and what it means for this test
        said = (f"p = {floor_text(pv, floor)}, the smallest attainable with {n} examples"
                + (f": this test cannot reach p < {alpha:.3g} here" if floor >= alpha else ""))
    elif floor is not None and floor >= alpha:
        said += (f"; with {n} examples it cannot reach p < {alpha:.3g}: its smallest attainable p is "
                 f"{floor_text(floor, floor)}")
    out = [Claim("no_evidence_shape", f"The data do not show that the change differs across layers (profile-shape "
                 f"sign-flip {said}; a uniform shift is not ruled out).", "headline", "profile_shape",
                 rows, "test", (Check("p >= alpha", f"p >= {alpha!r}"),), evidence=sf_rows.iloc[:1]),
           Claim("differs_across_layers", f"The change differs across layers (profile-shape sign-flip p "
                 f"{p_after(pv)}).", "headline", "profile_shape", rows, "test",
                 (Check("p < alpha", f"p < {alpha!r}"),), evidence=sf_rows.iloc[:1])]
    if contrasts is not None and len(contrasts):
        i = contrasts["mean_diff"].abs().idxmax()
        c = contrasts.loc[i]
        inside = c["ci_low"] <= 0 <= c["ci_high"]
        out.append(Claim("largest_contrast", f"The largest layer contrast is {c['contrast']} = {signed(c['mean_diff'])} "
                         f"(per-contrast {conf} interval {ci_text(c['ci_low'], c['ci_high'])}"
                         + ("; it includes 0)." if inside else ")."), "headline", "layer_contrasts", (c["contrast"],),
                         "contrast", (Check("the profile-shape test rejects a uniform shift", f"p < {alpha!r}",
                                            on="design"),),
                         evidence=contrasts.loc[[i]], design={"p": pv}))
    return out


def unnamed_claims(masses: pd.DataFrame) -> list[Claim]:
    """When mass on keys outside the named fields moves, the named-key change beside the raw one."""
    if masses is None or not len(masses) or "role" not in masses:
        return []
    m = masses.set_index(["role", "layer"])
    b, v = m.loc["baseline"], m.loc["variant"]
    dU = v["unnamed_mass"] - b["unnamed_mass"]
    if dU.isna().all():  # undefined in every layer (no example defines it): nothing to build a claim from
        return []
    layer = int(dU.abs().idxmax())  # the claim is built at any size of change: its check is the gate
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
    cited = masses[masses["layer"] == layer].set_index("role")["unnamed_mass"]
    evidence = pd.DataFrame({"layer": [layer], "unnamed_change": [float(cited["variant"] - cited["baseline"])]})
    brief = (f"in layer {layer} about {100 * share:.0f}% of that change is attention "
             f"{'leaving' if du < 0 else 'moving onto'} special tokens and "
             f"separators (SFM over the named keys: {signed(d_named)})" if share > 0 else
             f"part of it is attention moving to or from special tokens and separators (layer {layer}: SFM over the "
             f"named keys {signed(d_named)} against {signed(d_raw)} raw)")
    return [Claim("unnamed_shift", text + ".", "headline", "masses", (layer,),
                  requires=(Check("|change of unnamed mass| > 0.01", "abs(unnamed_change) > 0.01"),), evidence=evidence,
                  short=brief, qualifier=True)]


def learned_sink_claims(masses: pd.DataFrame) -> list[Claim]:
    """When the model has learned attention sinks (GPT-OSS), how much of each layer's attention they take: mass
    outside the sequence that counts in no field, like the unnamed mass (METHODS 3.2, sink mass)."""
    if masses is None or not len(masses) or "sink_mass" not in masses or masses["sink_mass"].isna().all():
        return []  # no sink mass: nothing to say of sinks (whether a sink is large enough, the check decides)
    lo, hi = masses.loc[masses["sink_mass"].idxmin()], masses.loc[masses["sink_mass"].idxmax()]
    where = lambda r: f"{r['role']}, layer {int(r['layer'])}" if "role" in r else f"layer {int(r['layer'])}"  # noqa: E731
    return [Claim("learned_sink", f"The model's learned attention sinks take {100 * float(lo['sink_mass']):.0f}–"
                  f"{100 * float(hi['sink_mass']):.0f}% of a layer's attention (lowest: {where(lo)}; highest: "
                  f"{where(hi)}): mass outside the sequence, counted in no field, so S + C + U stays below 1 by that "
                  "much; the Sink column of the mass table shows it per layer.",
                  "headline", "masses", tuple(sorted({int(lo["layer"]), int(hi["layer"])})),
                  requires=(Check("some sink mass > 0.01", "sink_mass > 0.01", every="any"),
                            Check("sink mass is a share", "sink_mass >= 0 and sink_mass <= 1")),
                  evidence=masses.loc[[lo.name, hi.name]],
                  short=f"the model's learned sinks take {100 * float(lo['sink_mass']):.0f}–"
                        f"{100 * float(hi['sink_mass']):.0f}% of a layer's attention, counted in no field",
                  qualifier=True)]


def sink_claims(masses: pd.DataFrame, first_fields: dict, n_examples: int) -> list[Claim]:
    """When the first token holds much of a layer's attention (an attention sink) and is a named token, its mass
    counts as same-field for its own field's queries and as cross-field for the others': say so, with where."""
    if masses is None or not len(masses) or "first_mass" not in masses or not first_fields \
            or masses["first_mass"].isna().all():
        return []
    top_i = masses["first_mass"].idxmax()
    top = masses.loc[top_i]
    field, count = max(first_fields.items(), key=lambda kv: kv[1])
    # its two checks are the gate: a sink of SINK or more, a first token named in most examples
    return [Claim("first_key_sink", f"The first token takes up to {100 * float(top['first_mass']):.0f}% of a layer's "
                  f"attention (layer {int(top['layer'])}, {top['role']}; an attention sink). It is a token of the "
                  f"{field} field in {count} of {n_examples} examples, so for every query outside the {field} field "
                  "that mass counts as cross-field; the first-key column of the mass table shows it per layer.",
                  "headline", "masses", (int(top["layer"]),),
                  requires=(Check(f"first-key mass >= {SINK:g}", f"first_mass >= {SINK!r}"),
                            Check("the first token is named in most examples", "2 * first_named >= n_examples",
                                  on="design")),
                  evidence=masses.loc[[top_i]], design={"first_named": count, "n_examples": n_examples},
                  short=f"the first token, an attention sink, takes up to {100 * float(top['first_mass']):.0f}% of a "
                        f"layer's attention and counts as cross-field outside the {field} field",
                  qualifier=True)]


def early_claims(init: pd.DataFrame, alpha: float, bias_off_runs: int) -> list[Claim]:
    """The share of the final difference already present at the earliest stored step, as numbers, where the
    difference is distinguishable from 0 at both steps (``share_at_init`` is empty elsewhere), how it changed
    from then to the end by the change's own test, and what would show the mechanism (METHODS 3.4). ``alpha``
    is this headline family's share of the report's error rate."""
    if init is None or not len(init):
        return []
    a = repr(float(alpha))
    decided = f"p_holm < {a} and (ci_low > 0 or ci_high < 0)"
    at_init = f"p_holm_init < {a} and (ci_low_init > 0 or ci_high_init < 0)"
    wordings, beyond, beyond_gates = _early_share(init, alpha)
    # grew / shrank in size: the change from the earliest step to the end; reversed only where Δ was
    # distinguishable from 0 at the earliest step with the other sign; each layer's word chosen by its checks
    same_or_noise = f"(delta_init * delta_final >= 0 or not ({at_init}))"
    words, gates = verdicts(init, {
        "reversed": Check("reversed: p_holm < alpha, delta init distinguishable from 0, the sign changed",
                          f"{decided} and {at_init} and delta_init * delta_final < 0"),
        "grew": Check("grew: p_holm < alpha and |delta final| > |delta init|, not reversed",
                      f"{decided} and abs(delta_final) > abs(delta_init) and {same_or_noise}"),
        "shrank": Check("shrank: p_holm < alpha and |delta final| < |delta init|, not reversed",
                        f"{decided} and abs(delta_final) < abs(delta_init) and {same_or_noise}"),
        "none": Check("no other layer reaches alpha", f"not ({decided})")}, "the change from the earliest step",
        "init_vs_final")
    said = {int(x): w for x, w in zip(init["layer"], words) if w not in ("none", "")}
    bits = [f"{word} in {layers_phrase([k for k, v in said.items() if v == word])}"
            for word in ("grew", "shrank", "reversed") if word in said.values()]
    text = ("; from then to the end it " + ", ".join(bits[:-1]) + (" and " if len(bits) > 1 else "") + bits[-1]
             + f" in size (p_Holm < {alpha:.3g})") if bits else \
        "; the change from then to the end reaches p_Holm < " + f"{alpha:.3g} in no layer"
    evidence = init.assign(asserted=words, beyond=beyond.to_numpy())
    # both first parts are built; their checks, not an if beside them, choose the one that prints
    out = [Claim("early_share", first + text + ".", "headline", "init_vs_final", rows_of(init),
                 requires=(*within,
                           Check("a share only where Δ is distinguishable from 0 at both steps",
                                 f"{at_init} and p_holm_final < {a} and (ci_low_final > 0 or ci_high_final < 0)",
                                 "share_at_init == share_at_init"),
                           Check("every layer's change from then to the end is worded", "asserted != ''")),
                 because=("shares computed on the same examples at both steps",), evidence=evidence,
                 verdicts=beyond_gates + gates)
           for first, within in wordings]
    out.append(Claim("needs_bias_off", "Whether an early difference is what the bias does to near-initial weights "
                     "or what training learned is not shown by this design: an evaluation of the trained SAAB "
                     "weights with the bias removed (python -m runners evaluate RUN --bias off) would split it.",
                     "finding", "init_vs_final",
                     requires=(Check("no bias-off evaluation in the input", "bias_off_runs == 0", on="design"),),
                     design={"bias_off_runs": bias_off_runs}))
    return out


def scope_claim(pretrained: bool, within_study: bool, n_examples: int) -> Claim:
    """What the pair report's p-values measure (its scope sentence)."""
    scope = ("These p-values measure precision over these examples (examples as the unit) for this one checkpoint "
             "and data set; other checkpoints or data need their own runs." if pretrained else
             "These p-values measure precision within one model (examples as the unit), not the effect of the "
             "architecture across initialisations" + (": the study's across-seed results above are that evidence."
                                                       if within_study else "; that needs several seeds."))
    return Claim("scope", scope, "headline", requires=(Check("at least 2 paired examples", "n_examples >= 2",
                                                             on="design"),),
                 because=("examples are the unit",), design={"n_examples": n_examples})


def censoring_claims(cens: dict | None, left_out: bool, table: str = "lengths") -> list[Claim]:
    """How many examples reached the evaluation cap (their true lengths are unknown)."""
    if not cens:
        return []
    k, n = cens["n_capped"], cens["n"]  # built with none at the cap too: its check, not an if, withholds it then
    return [Claim("censoring", f"{k} of {n} examples ({100 * k / n:.0f}%) reached the {cens['cap']}-token cap, "
                  "so their true lengths are unknown (at least the cap)" + (
                      "; the length analyses leave them out" if left_out else "") + ".",
                  "finding", table, requires=(Check("examples cut at the cap", "n_capped > 0", on="design"),),
                  design={"n_capped": k, "n": n})]


def _bin_signs(bins: pd.DataFrame | None, layers) -> pd.DataFrame:
    """Per layer, the signs of the mean Δ of its equal-count length bins from the shortest to the longest
    (``bin_signs``: "+, +, −") and whether they are one sign (``one_sign``; a bin whose mean is exactly 0 breaks it)."""
    rows = []
    for layer in layers:
        t = bins[bins["layer"] == layer].sort_values("bin") if bins is not None and len(bins) else None
        signs = [] if t is None else ["+" if v > 0 else "−" if v < 0 else "0" for v in t["mean_delta"]]
        rows.append({"layer": layer, "bin_signs": ", ".join(signs),
                     "one_sign": bool(signs) and len(set(signs)) == 1 and signs[0] != "0"})
    return pd.DataFrame(rows, columns=["layer", "bin_signs", "one_sign"])


def _turn_words(bin_signs: str) -> str:
    """How a layer's Δ turns across its length bins, from the shortest to the longest (where |Δ| would hide it)."""
    signs = bin_signs.split(", ")
    turns = sum(a != b for a, b in zip(signs, signs[1:]))
    return f"turns from {signs[0]} to {signs[-1]}" if turns == 1 else f"changes sign ({bin_signs})"


def length_claims(assoc: pd.DataFrame, adjusted: pd.DataFrame | None, alpha: float, families: int = 1,
                  bins: pd.DataFrame | None = None) -> list[Claim]:
    """The length association, named in the layers whose Spearman ρ reaches p_Holm < ``alpha`` (Holm over the
    layers; ``alpha`` this family's share of the headline's error rate) with its interval excluding 0,
    whatever their signs (both signs are said as such: a dependence, not a contradiction)."""
    if assoc is None or not len(assoc):
        return []
    # the layers named are those whose check holds: p_Holm < alpha and the interval excluding 0
    named, strong_gates = verdicts(assoc, {"associated": Check("p_Holm < alpha and interval excluding 0",
                                                               f"p_adj < {alpha!r} and (ci_low > 0 or ci_high < 0)")},
                                   "the length association", "length_association")
    strong = assoc[pd.Series([bool(w) for w in named], index=assoc.index, dtype=bool)]
    # built with no layer associated too: its check, not an if beside it, withholds it then
    n = int(assoc["n"].iloc[0])
    r2 = lambda x: fmt_num(x, 2).replace("-", "−")  # noqa: E731
    pos, neg = strong[strong["rho"] > 0], strong[strong["rho"] < 0]
    bits = [f"ρ {r2(g['rho'].iloc[0]) if len(g) == 1 else r2(g['rho'].min()) + ' to ' + r2(g['rho'].max())} in "
            f"{layers_phrase(g['layer'])}" for g in (pos, neg) if len(g)]
    signs = "; of both signs" if len(pos) and len(neg) else ""
    text = (f"In {len(strong)} of {len(assoc)} layers the per-example Δ is associated with evaluated length "
            f"(Spearman {' and '.join(bits)}{signs}; p_Holm < {alpha:.3g} over {len(assoc)} layers"
            + (f" with α shared by {families} headline families" if families > 1 else "")
            + f", per-layer interval excluding 0, on {n} examples"
            + (f" below the cap; {int(assoc['n_capped'].iloc[0])} at the cap are left out"
               if assoc["capped"].iloc[0] == "exclude" and assoc["n_capped"].iloc[0] else "")
            + "), so the mean Δ depends on this sample's lengths; an association, not an effect of length")
    out = [Claim("depends_on_length", text + ".", "headline", "length_association", rows_of(strong),
                 requires=(Check("some layer is associated", "rows >= 1", on="design"),
                           Check("at least 8 examples", f"n >= {LENGTH_MIN_N}")), evidence=strong,
                 verdicts=strong_gates)]
    if adjusted is not None and len(adjusted):
        out.append(length_adjusted_claim(adjusted, strong, bins, n))
    out.append(length_not_claimed(assoc, alpha, families))
    return out


def length_not_claimed(assoc: pd.DataFrame, alpha: float, families: int = 1) -> Claim:
    """Where no layer's length association is claimed, that it is not and why: the layer closest to the family's
    threshold with its ρ and p_Holm (the length-adjusted slopes beside the table are estimates, not this test).
    Its gate reads every layer's row itself: none reaches p_Holm < ``alpha`` with its interval excluding 0."""
    best = assoc.loc[[assoc["p_adj"].idxmin()]] if assoc["p_adj"].notna().any() else assoc.iloc[:1]
    b = best.iloc[0]
    family = f"{len(assoc)} layers" + (f"; α {alpha * families:g} shared by {families} headline families"
                                       if families > 1 else "")
    said = fmt_p(b["p_adj"], alpha=alpha)  # a digit more where rounding would cross this family's threshold
    said = said if said.startswith("<") else f"= {said}"
    capped = (f" below the cap ({int(b['n_capped'])} at the cap left out)"
              if b.get("capped") == "exclude" and b.get("n_capped", 0) else "")
    rho = fmt_num(b["rho"], 2).replace("-", "−")
    return Claim("length_not_claimed", f"No length association is claimed: no layer's Spearman ρ of Δ with evaluated "
                 f"length reaches p_Holm < {alpha:.3g} ({family}) with its interval excluding 0; the closest is layer "
                 f"{int(b['layer'])}, ρ {rho} with p_Holm {said}, on {int(b['n'])} examples{capped}.",
                 "finding", "length_association", rows_of(best),
                 requires=(Check("no layer is associated",
                                 f"not (p_adj < {alpha!r} and (ci_low > 0 or ci_high < 0))"),
                           Check("at least 8 examples", f"n >= {LENGTH_MIN_N}"),
                           Check("a layer with a p_Holm to quote", "quotable >= 1", on="design")),
                 evidence=assoc, design={"quotable": int(assoc["p_adj"].notna().sum())})


def length_adjusted_claim(adjusted: pd.DataFrame, strong: pd.DataFrame, bins: pd.DataFrame | None, n: int) -> Claim:
    """What follows the length association (:func:`length_claims`): Δ at the median length and its slope in the layers
    it names (``strong``), with |Δ| larger or smaller in longer examples where Δ keeps one sign in every length bin,
    else how its sign turns; ``n`` the association's examples (the same minimum holds)."""
    a = adjusted[adjusted["layer"].isin(strong["layer"])]
    # |Δ| only where Δ keeps one sign in every length bin; where it turns, the turn is said (|Δ| hid a Δ going
    # from +0.087 to -0.093 as "smaller in longer examples")
    a = a.merge(_bin_signs(bins, list(a["layer"])), on="layer", how="left")
    # each layer's words chosen by its checks; a turn said as the bins show it (nothing without bins)
    kinds, gates = verdicts(a, {
        "larger": Check("|Δ| larger: one sign in every length bin, slope on Δ's side",
                        "one_sign and slope_per_10 * delta_at_reference > 0"),
        "smaller": Check("|Δ| smaller: one sign in every length bin, slope against Δ",
                         "one_sign and slope_per_10 * delta_at_reference < 0"),
        "turns": Check("a turn said only where the bins' signs differ", "not one_sign and bin_signs != ''")},
        "|Δ| against length", "length_adjusted")
    a = a.assign(asserted=[_turn_words(r["bin_signs"]) if k == "turns" else k for k, (_, r) in
                           zip(kinds, a.iterrows())])
    parts = []
    for word in [w for w in dict.fromkeys(a["asserted"]) if w]:
        where = layers_phrase(a.loc[a["asserted"] == word, "layer"])
        parts.append(f"|Δ| is {word} in longer examples in {where}" if word in ("larger", "smaller") else
                     f"in {where} Δ {word} as examples grow (length bins from shortest to longest)")
    some = lambda col: span(a[col]) if len(a) else "undefined"  # noqa: E731  (no layer: built, withheld)
    return Claim("length_adjusted", f"At the median length of those examples "
                 f"({adjusted['reference_length'].iloc[0]:g} tokens) Δ is {some('delta_at_reference')} in "
                 f"{layers_phrase(a['layer'])}, changing by {some('slope_per_10')} per 10 tokens"
                 + (f": {'; '.join(parts)}." if parts else "."),
                 "headline", "length_adjusted", rows_of(a), evidence=a,
                 requires=(Check("a length association was found in these layers", "rows >= 1",
                                 on="design"),
                           # what the association's own claim needs: below it, this one was printed alone
                           Check("the association had at least 8 examples", f"n >= {LENGTH_MIN_N}",
                                 on="design"),
                           Check("every layer with length bins is worded",
                                 "asserted != '' or bin_signs == ''")),
                 design={"n": n}, verdicts=gates)


def effects_claims(eff: pd.DataFrame, *, n_examples: int, pretrained: bool, alpha: float, confidence: float,
                   permutations: int, families: int = 1) -> list[Claim]:
    """The answer (which layers rose or fell, and how sure) and the per-layer findings of the effects table.

    ``alpha`` is this family's share of the headline's error rate (the report's alpha / ``families``)."""
    conf = f"{100 * confidence:.0f}%"
    n_used = int(eff["n"].min()) if "n" in eff and len(eff) else n_examples
    count = f"{n_examples} examples" if n_used >= n_examples else \
        f"{n_used} of {n_examples} examples; {n_examples - n_used} without a valid query left out"
    if families > 1:
        count += f"; α {alpha * families:g} shared by {families} headline families, {alpha:.3g} each"
    lead = (f"On this pretrained checkpoint ({count}, the intervention applied at inference only)"
            if pretrained else f"Within one initialisation ({count})")
    brief = (f"on this pretrained checkpoint ({n_used} examples)" if pretrained
             else f"within one initialisation ({n_used} examples)")
    n_layers = len(eff)
    small = signflip_floor(n_used, permutations)[1]  # few examples, not few draws, limit it: said so
    floor = float(eff["p_holm_floor"].max())  # the frame's floor column, as the table's cells read it
    note = f" with {n_used} examples" if small else ""
    answer = direction_claim(eff.rename(columns={"mean_diff": "d"}), lead, est="d", p="p_holm", lo="ci_low",
                             hi="ci_high", alpha=alpha, metric="SFM", table="effects", conf=conf, floor=floor,
                             family=f"Holm over {n_layers} layers", floor_note=note, brief=brief)
    # built whatever the floor: its check is the gate (printed only where the floor reaches alpha)
    out = [answer, Claim("pair_floor", f"With {n_used} examples the sign-flip test cannot reach p_Holm < {alpha:.3g} "
                         f"over {n_layers} layers: the smallest attainable p_Holm is {floor_text(floor, floor)} "
                         f"(about {n_layers} × 2/2^{n_used}); the per-layer intervals show the precision there is.",
                         "headline", "effects", requires=(Check("smallest attainable p_Holm >= alpha",
                                                                f"floor >= {alpha!r}", on="design"),),
                         design={"floor": floor}, qualifier=True,
                         short=f"with {n_used} examples no layer can reach it (smallest attainable p_Holm "
                               f"{floor_text(floor, floor)})")]
    out += small_sample_claims(n_used, confidence)
    return out + missed_change_claims(eff, n_used, alpha, floor, table="effects") + effect_findings(eff, conf)


def small_sample_claims(n_used: int, confidence: float) -> list[Claim]:
    """Below ``SMALL_N`` examples a percentile interval covers less than its label: say how much less
    (the coverage simulation of ``benchmarks/bench_coverage.py``, for 95% intervals). Built at any n: its check
    is the gate."""
    conf = f"{100 * confidence:.0f}%"
    if round(confidence, 6) == 0.95:
        normal, skewed = percentile_coverage(n_used)
        how = (f"in simulation a nominal 95% percentile interval over {'at most 5' if n_used < 5 else n_used} "
               f"examples covered the true mean in about {normal:.0%} of samples from a normal population and "
               f"{skewed:.0%} from a skewed one (benchmarks/bench_coverage.py)")
    else:
        how = "a percentile interval over this few examples covers less often than its label says"
    return [Claim("small_sample_intervals", f"With {n_used} examples the per-layer {conf} intervals are narrower "
                  f"than their label: {how}; read them as rough, and the sign-flip p-values, which are exact, as "
                  "the test.", "headline", "effects",
                  requires=(Check(f"fewer than {SMALL_N} examples", f"n_used < {SMALL_N}", on="design"),),
                  design={"n_used": n_used})]


def effect_findings(eff: pd.DataFrame, conf: str) -> list[Claim]:
    """Per layer, the effects table's row in words (the extremes and a pointer beyond 12 layers)."""
    out = []
    eff = eff.sort_values("layer")
    rows = eff
    if len(eff) > MAX_LAYER_FINDINGS:  # 30 lines of one shape bury the rest: the extremes, then the table
        order = eff["mean_diff"].to_numpy().argsort(kind="stable")
        rows = eff.iloc[sorted({int(order[-1]), int(order[0])})]
    # the pointer is built at any number of layers; its check, not the if above, says when the list is cut
    out.append(Claim("layers_listed", f"Per layer, for all {len(eff)} layers: the effects table; below, the layers "
                     "with the largest and the smallest Δ.", "finding", "effects",
                     requires=(Check(f"more than {MAX_LAYER_FINDINGS} layers", f"rows > {MAX_LAYER_FINDINGS}",
                                     on="design"),), evidence=eff))
    for i in range(len(rows)):
        r = rows.iloc[i]
        floor = at_printed_floor(r["p_holm"], r.get("p_holm_floor"))  # as the table's cell prints it
        p = f"= {floor} (smallest attainable)" if floor else p_after(r["p_holm"])
        out.append(Claim("layer_effect", f"Layer {int(r['layer'])}: SFM {fmt_num(r['baseline_mean'])} → "
                         f"{fmt_num(r['variant_mean'])}, Δ = {signed(r['mean_diff'])}, per-layer {conf} CI "
                         f"{ci_text(r['ci_low'], r['ci_high'])}, d_z = {fmt_num(r['dz'], 2).replace('-', '−')}, p_Holm {p}.",
                         "finding", "effects", (int(r["layer"]),), because=("quotes the table",),
                         requires=(Check("the row's numbers are defined", "mean_diff == mean_diff and "
                                         "ci_low == ci_low and ci_high == ci_high and p_holm == p_holm"),),
                         evidence=rows.iloc[[i]]))
    return out


def distance_claims(distance: pd.DataFrame, conf: str = "95%") -> list[Claim]:
    """The profile distance, with its interval."""
    if distance is None or not len(distance):
        return []
    r = distance.iloc[0]
    return [Claim("profile_distance", f"Profile distance between the two layer profiles: "
                  f"{fmt_num(r['profile_distance'], 4)} ({conf} interval {ci_text(r['ci_low'], r['ci_high'])}).",
                  "finding", "profile_distance", evidence=distance.iloc[:1],
                  requires=(Check("the distance and its interval are defined", "profile_distance == profile_distance "
                                  "and ci_low == ci_low and ci_high == ci_high"),))]


def adjusted_claims(adj: pd.DataFrame, without_query: int = 0) -> list[Claim]:
    """The opportunity-adjusted analysis's counts: of the examples it leaves out, ``without_query`` have no
    valid query at all (left out of the SFM effects too); the rest show one named field only (O_e = 1)."""
    r = adj.iloc[0]
    n, excluded = int(r["n"]), int(r["excluded"])
    one_field = excluded - without_query
    why = "; ".join(x for x in (f"{one_field} with one visible field" if one_field else "",
                                f"{without_query} without a valid query" if without_query else "") if x)
    return [Claim("adjusted_counts", f"Opportunity-adjusted analysis: {n} of {n + excluded} examples"
                  + (f" ({excluded} left out: {why})" if excluded else " (none left out)")
                  + f", mean O_e {fmt_num(r['mean_opportunity_analysed'])} over the {n} analysed"
                  + (f" ({fmt_num(r['mean_opportunity'])} over every example with a named position, the table's)"
                     if excluded else "") + ".", "finding", "adjusted", evidence=adj.iloc[:1],
                  requires=(Check("the counts add up", f"excluded >= {without_query}"),))]
