"""Drawers of the regime-switching figures (from the report's per-point frames)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from reports import figures as F
from reports.theme import palette

DRAWERS: dict = {}
drawer = F.registrar(DRAWERS)
from routestats.report import point_label as _point

REGIMES = ("NC", "NS", "Q", "K", "E", "J", "ambiguous")
COLORS = dict(zip(REGIMES, ("#BBBBBB", "#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52", "#000000")))
MAX_PANELS = 6




def _at(df, k):
    return df[(df["layer"] == k[0]) & (df["example"] == k[1]) & (df["token"] == k[2])]


def _panels(keys):
    n = min(len(keys), MAX_PANELS)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    return n, rows, cols


@drawer("regime_answer")
def answer(frames, params):
    """The first screen's figure: λ_max of every operating point by layer (one colour per example), the switching
    threshold λ_max = 1 dashed."""
    s = frames["summary"]
    fig, ax = plt.subplots(figsize=(4.6, 2.7))
    examples = sorted(s["example"].unique())
    colors = palette("colorblind", len(examples))
    for ex, color in zip(examples, colors):
        g = s[s["example"] == ex].sort_values("layer")
        ax.plot(g["layer"], g["lambda_max"], marker="o", ms=4, lw=1, color=color, label=f"example {int(ex)}")
    ax.axhline(1, color="0.25", lw=0.9, ls="--")
    lam = s["lambda_max"].to_numpy(float)
    if np.all(lam > 0):  # a log axis: λ_max spans orders of magnitude, and 1 stays in view
        ax.set_yscale("log")
        ax.set_ylim(min(lam.min(), 1) / 1.5, max(lam.max(), 1) * 1.5)
    ax.set_xticks(sorted(s["layer"].unique()))
    ax.tick_params(labelsize=9)
    ax.set_xlabel("layer", fontsize=10)
    ax.set_ylabel("λ_max (> 1: switching)", fontsize=9)
    if len(examples) <= 8:
        ax.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout(pad=0.4)
    return fig


@drawer("regime_spectrum")
def spectrum(frames, params):
    t = frames
    summ = t["summary"].reset_index(drop=True)
    keys = [tuple(int(x) for x in r[["layer", "example", "token"]]) for _, r in summ.iterrows()]
    labels = [_point(r) for _, r in summ.iterrows()]
    pal = palette("viridis", max(len(keys), 2))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    for i, (k, lab) in enumerate(zip(keys, labels)):
        sp = _at(t["spectrum"], k) if "spectrum" in t else None
        if sp is not None and len(sp):
            a1.plot(sp["rank"], sp["eigenvalue"], marker=".", ms=3, color=pal[i], label=lab)
        sw = _at(t["sweep"], k) if "sweep" in t else None
        if sw is not None and len(sw):
            a2.plot(sw["tau0"], sw["lambda_max"], color=pal[i], label=lab)
            tc = summ.loc[i, "tau_cert"]
            if tc > 0:
                a2.axvline(tc, color=pal[i], ls="--", lw=1)
            tm = summ.loc[i, "tau_max_dual"]
            if np.isfinite(tm) and tm > 0:
                a2.axvline(tm, color=pal[i], ls=":", lw=1)
    for ax in (a1, a2):
        ax.axhline(1, color="0.2", lw=1)
        ax.set_yscale("symlog", linthresh=1)
    a1.set(xlabel="rank i", ylabel="λ_i(W)", title="Spectrum of W on S (λ > 1: switching)")
    a2.set(xlabel="severity level τ0", ylabel="λ_max(W_τ0)",
           title="Severity sweep (dashed: τ_cert, dotted: τ_max)")
    if len(keys) <= 8:
        a1.legend(fontsize=8)
    fig.tight_layout()
    return fig


@drawer("regime_counterfactual")
def counterfactual(frames, params):
    t = frames
    summ = t["summary"].reset_index(drop=True)
    keys = [tuple(int(x) for x in r[["layer", "example", "token"]]) for _, r in summ.iterrows()]
    labels = [_point(r) for _, r in summ.iterrows()]
    cf = t.get("counterfactual")
    if cf is not None and len(cf):
        n, rows, cols = _panels(keys)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
        names = ["g_T", "g_TQ", "g_TK", "g_full"]
        ticks = ["T", "T+Q", "T+K", "full"]
        for ax, k, lab in zip(axes.ravel(), keys[:n], labels[:n]):
            c = _at(cf, k)
            ana = c[c["method"] == "analytic"]
            for j, (_, r) in enumerate(ana.iterrows()):
                x = np.arange(4) + (j - 0.5) * 0.38
                ax.bar(x, r[names].astype(float), width=0.36, label=f"{r['direction']} ({r['regime']})",
                       color=("#4C72B0", "#C44E52")[j % 2])
                fdr = c[(c["direction"] == r["direction"]) & (c["method"] != "analytic")]
                if len(fdr):
                    ax.scatter(x, fdr.iloc[-1][names].astype(float), color="black", marker="x", s=18, zorder=3)
            ax.axhline(0, color="0.2", lw=1)
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.set_xticks(range(4), ticks)
            ax.set(title=lab, ylabel="directional growth g")
            ax.legend(fontsize=7)
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.suptitle("Counterfactual growth (bars: analytic; ×: finite forward)", fontsize=11)
        fig.tight_layout()
        return fig


@drawer("regime_shares")
def shares(frames, params):
    t = frames
    reg = t.get("regimes")
    if reg is not None and len(reg):
        wide = (reg.assign(point=[_point(r) + " · " + r["source"] for _, r in reg.iterrows()])
                .pivot_table(index="point", columns="regime", values="share", sort=False).fillna(0.0))
        wide = wide[[c for c in REGIMES if c in wide.columns]]
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(wide) + 1.6))
        left = np.zeros(len(wide))
        for c in wide.columns:
            ax.barh(range(len(wide)), wide[c], left=left, color=COLORS[c], label=c)
            left += wide[c].to_numpy()
        ax.set_yticks(range(len(wide)), [F.plain(i) for i in wide.index], fontsize=8)
        ax.invert_yaxis()
        ax.set(xlabel="share of directions", xlim=(0, 1), title="Regime shares by direction set")
        ax.legend(ncol=len(wide.columns), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(wide) < 6 else -0.1))
        fig.tight_layout()
        return fig


@drawer("regime_overlap")
def overlap(frames, params):
    t = frames
    summ = t["summary"].reset_index(drop=True)
    keys = [tuple(int(x) for x in r[["layer", "example", "token"]]) for _, r in summ.iterrows()]
    labels = [_point(r) for _, r in summ.iterrows()]
    ov = t.get("overlap")
    if ov is not None and len(ov):
        k = keys[0]
        m = _at(ov, k)
        fig, ax = plt.subplots(figsize=(6.2, 4.2))
        heads = sorted(m["head"].unique())
        hp = palette("tab10", max(len(heads), 1))
        for i, h in enumerate(heads):
            g = m[m["head"] == h]
            ax.scatter(g["overlap"], g["response"], s=8, alpha=0.6, color=hp[i % 10], label=f"head {h}")
        ax.set(xlabel="support overlap s(v) = |Π_K Q_r v|", ylabel="response |J_q v|",
               title=f"Query gating: overlap vs response, {labels[0]}")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        return fig


@drawer("regime_map")
def map(frames, params):
    t = frames
    summ = t["summary"].reset_index(drop=True)
    keys = [tuple(int(x) for x in r[["layer", "example", "token"]]) for _, r in summ.iterrows()]
    labels = [_point(r) for _, r in summ.iterrows()]
    lat = t.get("lattice")
    if lat is not None and len(lat):
        n, rows, cols = _panels(keys)
        fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 2.9 * rows + 0.6), squeeze=False)
        for ax, k, lab in zip(axes.ravel(), keys[:n], labels[:n]):
            m = _at(lat, k)
            for c in REGIMES:
                s = m[m["regime"] == c]
                if len(s):
                    ax.scatter(s["lon"], s["lat"], s=5, color=COLORS[c], label=f"{c} ({100 * len(s) / len(m):.0f}%)")
            ax.set(xlim=(-180, 180), ylim=(-90, 90), xlabel="longitude (°)", ylabel="latitude (°)", title=lab)
            ax.legend(fontsize=7, markerscale=2, loc="lower left")
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.suptitle("Regime map on the slice span(v_rel, v_sev, random): Fibonacci lattice, analytic labels", fontsize=11)
        fig.tight_layout()
        return fig


@drawer("regime_depth")
def depth_profile(frames, params):
    """Leading switching eigenvalue and normalised switching dimension by normalised depth, one colour per model:
    dots are prompts, lines join the medians."""
    bd, pts = frames["by_depth"], frames["points"]
    models = sorted(bd["model"].unique())
    pal = palette("colorblind", max(len(models), 2))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    for i, m in enumerate(models):
        b, p = bd[bd["model"] == m], pts[pts["model"] == m]
        a1.plot(b["depth"], b["lambda_max"], marker="o", color=pal[i], label=m)
        a1.scatter(p["depth"], p["probe_lambda_max"], color=pal[i], s=12, alpha=0.5)
        a2.plot(b["depth"], b["normalised_d_sw"], marker="o", color=pal[i], label=m)
        a2.scatter(p["depth"], p["probe_normalised_d_sw"], color=pal[i], s=12, alpha=0.5)
    a1.axhline(1, color="0.2", lw=1)
    a1.set_yscale("log")
    probe = int(pts["probe"].iloc[0]) if len(pts) else 0
    a1.set(xlabel="normalised depth (layer / (layers − 1))", ylabel="λ_max (> 1: switching)",
           title=f"Leading switching eigenvalue (probe p = {probe})")
    a2.set(xlabel="normalised depth (layer / (layers − 1))", ylabel="d_sw / dim S_proj", ylim=(0, 1.02),
           title=f"Normalised switching dimension (probe p = {probe})")
    a1.legend(fontsize=9)
    fig.tight_layout()
    return fig
