"""Figures drawn from a report's finished frames (matplotlib Agg, seaborn's look: :mod:`reports.theme`); they draw, never aggregate.

:data:`REGISTRY` maps a :class:`routestats.report.Figure` kind to ``draw(frames, params)``, which
returns a matplotlib Figure; :func:`save` writes PNG (+ PDF) and returns the PNG bytes for
embedding. Register a new kind with ``@drawer("kind")`` (here or in ``reports/training.py``,
``reports/study.py``, ``reports/mofa.py``, ``reports/regime.py``, ``reports/plan.py``).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports.axes import (DISPLAY_PX, integer_ticks, layer_colors, layer_key, layer_step,  # noqa: E402
                          layer_ticks, longest_label, word_map_boxes)
from reports.theme import RC  # noqa: E402

PALETTE = {"baseline": "#4C72B0", "variant": "#DD8452"}
SHORT = {"baseline": "baseline", "variant": "variant", "difference": "variant − baseline", "run": "run"}
matplotlib.rcParams.update(RC)


def registrar(table: dict):
    """A decorator ``drawer(kind)`` that enters ``fn(frames, params) -> matplotlib Figure`` into
    ``table`` (each drawing module keeps its own; :mod:`reports.drawing` joins them explicitly)."""

    def drawer(kind: str):
        def deco(fn):
            if kind in table:
                raise ValueError(f"two drawers for figure kind {kind!r}")
            table[kind] = fn
            return fn

        return deco

    return drawer


DRAWERS: dict = {}  # the one-pair report's figure kinds
drawer = registrar(DRAWERS)


def plain(text) -> str:
    """User text for matplotlib: '$' would start mathtext, so it is escaped."""
    return str(text).replace("$", r"\$")


VECTOR_FORMATS = ("pdf", "svg")


def save(fig, folder: Path, name: str, vector: tuple = ()) -> bytes:
    """Write ``name.png`` and a copy per vector format (``pdf``, ``svg``) under ``folder`` (a report's
    temporary folder, renamed into place as a whole); return the PNG bytes."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine, PlaceHolderLayoutEngine

    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        # laid out once, here: savefig would lay it out inside a draw of its own (rendering off) before drawing
        # it (word map, 2 x 64 pair: 2.8-3.2 -> 2.4-2.7 s CPU, three runs each)
        fig.get_layout_engine().execute(fig)
        fig.set_layout_engine("none")
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # fig.tight_layout() leaves this placeholder behind, and savefig then draws the whole figure once
        # more (rendering off) before drawing it: a fifth of the figures' CPU, for the same pixels
        fig.set_layout_engine(None)
    buf = io.BytesIO()
    # layouts are set by tight_layout (no second "tight" draw); zlib level 2, not PIL's 6: the seven PNGs of a 2 x 64
    # pair page 0.85-1.04 -> 0.80 s CPU to save, 684 -> 746 kB
    fig.savefig(buf, format="png", dpi=130, pil_kwargs={"compress_level": 2})
    png = buf.getvalue()
    (folder / f"{name}.png").write_bytes(png)
    for fmt in vector:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else {}))
        (folder / f"{name}.{fmt}").write_bytes(buf.getvalue())
    plt.close(fig)
    return png


def heat(ax, m: pd.DataFrame, *, vmin, vmax, cmap, annot: bool = True, cbar: bool = False, fmt: str = "{:.2f}",
         ticklabels=None, labels=None, label_x: bool = True, label_y: bool = True):
    """A labelled heatmap with imshow (seaborn's heatmap redraws the whole figure per call).

    ``label_x`` / ``label_y`` False: that axis has no ticks at all (an inner panel of small multiples whose
    outer panels name the rows and columns). Its ticks are never made: every tick is two lines and a label,
    and making them to remove them cost the word map a third of its CPU."""
    data = np.asarray(m, dtype=float)
    im = ax.imshow(data, vmin=vmin, vmax=vmax, cmap=cmap, aspect="equal", interpolation="nearest")
    ax.grid(False)
    rows = [str(x) for x in m.index] if ticklabels is None else ticklabels
    cols = [str(x) for x in m.columns] if ticklabels is None else ticklabels
    if label_x:
        ax.set_xticks(range(data.shape[1]), cols, rotation=90 if ticklabels is not None else 0)
    else:
        ax.set_xticks([])
    if label_y:
        ax.set_yticks(range(data.shape[0]), rows)
    else:
        ax.set_yticks([])
    _hatch_missing(ax, data)  # not measured: hatched, never a colour that reads as a value
    if annot:
        cm = plt.get_cmap(cmap)
        for (i, j), v in np.ndenumerate(data):
            if np.isnan(v):
                ax.text(j, i, "–", ha="center", va="center", fontsize=9, color="0.4")
                continue
            r, g, b, _ = cm((v - vmin) / (vmax - vmin) if vmax > vmin else 0.5)
            ax.text(j, i, fmt.format(v) if labels is None else labels[i][j], ha="center", va="center", fontsize=9,
                    color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
    if cbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


@drawer("profile")
def _profile(frames, params):
    return profile(frames["layers"], frames["effects"], params.get("labels", {}))


def profile(layers: pd.DataFrame, effects: pd.DataFrame, labels: dict):
    """SFM per layer for both models, and the paired difference with its CI."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for role in ("baseline", "variant"):
        t = layers[layers["role"] == role]
        a.plot(t["layer"], t["sfm"], marker="o", color=PALETTE[role], label=SHORT[role])
    a.set(xlabel="layer", ylabel="same-field mass", title="Layer profile")
    layer_ticks(a, layers["layer"].unique())
    # short labels outside the axes (the run ids are in the report's subtitle): no line is covered
    a.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    e = effects.sort_values("layer")
    err = np.vstack([e["mean_diff"] - e["ci_low"], e["ci_high"] - e["mean_diff"]])
    b.errorbar(e["layer"], e["mean_diff"], yerr=err, fmt="o", color="#55A868", capsize=4)
    b.axhline(0, color="0.3", lw=1, ls="--")
    b.set(xlabel="layer", ylabel="Δ SFM (variant − baseline)", title="Paired difference, 95% CI")
    layer_ticks(b, e["layer"].unique())
    fig.tight_layout()
    return fig


VERDICT_COLORS = {"rose": "#2a7d4f", "fell": "#b03a2e", "excludes": "#8fbf9f", "includes": "0.55"}
VERDICT_WORDS = {"rose": "rose (p < α)", "fell": "fell (p < α)", "excludes": "interval excludes 0, p ≥ α",
                 "includes": "interval includes 0"}


@drawer("answer_layers")
def answer_layers(frames, params):
    """The answer at a glance: each layer's estimate with its interval, coloured by the verdict the headline
    states of it (rose, fell, excludes 0 without p < α, includes 0); with ``points``, each unit's estimate
    (a seed's Δ) as a small dot beside it. Compact: it sits beside the first-screen sentence."""
    e = frames["estimates"].sort_values("layer")
    pts = frames.get("points")
    n = len(e)
    fig, ax = plt.subplots(figsize=(4.6, 2.7))
    x = e["layer"].to_numpy(float)
    if pts is not None and len(pts):
        jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(pts))
        ax.scatter(pts["layer"].to_numpy(float) - 0.22 + jitter, pts["estimate"], s=9, color="0.45", alpha=0.8,
                   lw=0, label=f"each {params.get('points', 'unit')}", zorder=2)
    for verdict, color in VERDICT_COLORS.items():
        g = e[e["asserted"] == verdict]
        if not len(g):
            continue
        err = np.vstack([g["estimate"] - g["low"], g["high"] - g["estimate"]])
        ax.errorbar(g["layer"].to_numpy(float), g["estimate"], yerr=err, fmt="o", ms=4 if n <= 12 else 3,
                    capsize=3 if n <= 12 else 0, color=color, lw=1.4, label=VERDICT_WORDS[verdict], zorder=3)
    ax.axhline(0, color="0.25", lw=0.9, ls="--", zorder=1)
    layer_ticks(ax, e["layer"].unique(), most=10)
    ax.set_xlim(x.min() - 0.6, x.max() + 0.6)
    ax.tick_params(labelsize=9)
    ax.set_xlabel("layer", fontsize=10)
    ax.set_ylabel(f"Δ {params.get('metric', 'SFM')} ({params.get('conf', '95%')} interval)", fontsize=9)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False,
              handletextpad=0.3, columnspacing=1.0)
    fig.tight_layout(pad=0.4)
    return fig


@drawer("flow_measures")
def flow_measures(frames, params):
    """Δ SFM per layer with its CI under each routing measure (weights, norm-weighted, rollout)."""
    e = frames["effects"]
    measures = list(dict.fromkeys(e["measure"]))
    colors = dict(zip(measures, ("#4C72B0", "#C44E52", "#8172B3")))
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    width = 0.8 / len(measures)
    for k, m in enumerate(measures):
        t = e[e["measure"] == m].sort_values("layer")
        x = t["layer"].to_numpy(float) + (k - (len(measures) - 1) / 2) * width
        err = np.vstack([t["mean_diff"] - t["ci_low"], t["ci_high"] - t["mean_diff"]])
        ax.errorbar(x, t["mean_diff"], yerr=err, fmt="o", capsize=3, color=colors[m], label=m)
    ax.axhline(0, color="0.3", lw=1, ls="--")
    layer_ticks(ax, e["layer"].unique())
    ax.set(xlabel="layer", ylabel="Δ SFM (variant − baseline)", title="Three routing measures, paired CIs")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


@drawer("field_heatmaps")
def _field_heatmaps(frames, params):
    return field_heatmaps(frames["field_to_field"], params.get("labels", {}))


def field_heatmaps(f2f: pd.DataFrame, labels: dict):
    """Field-to-field mass per layer: baseline, variant, difference (rows = source field).

    Beyond 6 layers the small multiples would run to metres: then one compact heatmap per role,
    layers as rows and the source → destination pairs as columns."""
    layers = sorted(f2f["layer"].unique())
    if len(layers) > 6:
        return _field_compact(f2f, layers)
    roles = [r for r in ("baseline", "variant", "difference", "run") if r in set(f2f["role"])]
    fig, axes = plt.subplots(len(layers), len(roles), figsize=(3.2 * len(roles), 2.6 * len(layers)), squeeze=False)
    diff_max = max(1e-9, float(f2f.loc[f2f["role"] == "difference", "mass"].abs().max()))
    for i, layer in enumerate(layers):
        for j, role in enumerate(roles):
            t = f2f[(f2f["role"] == role) & (f2f["layer"] == layer)]
            m = t.pivot(index="source_name", columns="destination_name", values="mass")
            m.index = [plain(x) for x in m.index]
            m.columns = [plain(x) for x in m.columns]
            kw = dict(vmin=-diff_max, vmax=diff_max, cmap="RdBu_r") if role == "difference" else dict(vmin=0, vmax=1, cmap="viridis")
            # the panels share their fields: named on the outer panels only (2 x 64 pair: 0.99 -> 0.85 s CPU)
            heat(axes[i, j], m, label_x=i == len(layers) - 1, label_y=j == 0, **kw)
            axes[i, j].set(title=f"L{layer} {SHORT[role]}", xlabel="destination" if i == len(layers) - 1 else "",
                           ylabel="source" if j == 0 else "")
    fig.tight_layout()
    return fig


@drawer("head_heatmaps")
def _head_heatmaps(frames, params):
    return head_heatmaps(frames["head_sfm"], params.get("labels", {}))


def _hatch_missing(ax, data: np.ndarray) -> None:
    """Cells with no value (NaN: not measured, e.g. excluded trivial queries) hatched grey, never a colour."""
    for i, j in zip(*np.nonzero(np.isnan(data))):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.93", hatch="///", edgecolor="0.6", lw=0))


def _field_compact(f2f: pd.DataFrame, layers) -> "plt.Figure":
    """Beyond 6 layers: one heatmap per role, layers across (thinned ticks) and the source → destination
    pairs down, so the figure keeps the page's width whatever the layer and field counts."""
    roles = [r for r in ("baseline", "variant", "difference", "run") if r in set(f2f["role"])]
    t = f2f.assign(pair=f2f["source_name"].map(plain) + " → " + f2f["destination_name"].map(plain))
    pairs = list(dict.fromkeys(t.sort_values(["source", "destination"])["pair"]))
    cell_w = min(0.3, 7.0 / len(layers))
    width = 2.4 + cell_w * len(layers) + 1.2
    heights = [0.26 * len(pairs) + 0.55 for _ in roles]
    fig, axes = plt.subplots(len(roles), 1, figsize=(width, sum(heights) + 0.5), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    diff_max = max(1e-9, float(np.nanmax(np.abs(t.loc[t["role"] == "difference", "mass"].to_numpy(float)), initial=0)))
    for ax, role in zip(axes[:, 0], roles):
        m = t[t["role"] == role].pivot(index="pair", columns="layer", values="mass").reindex(index=pairs, columns=layers)
        data = m.to_numpy(float)
        kw = dict(vmin=-diff_max, vmax=diff_max, cmap="RdBu_r") if role == "difference" else dict(vmin=0, vmax=1, cmap="viridis")
        im = ax.imshow(data, aspect="auto", interpolation="nearest", **kw)
        _hatch_missing(ax, data)
        ax.grid(False)
        ax.set_yticks(range(len(pairs)), pairs, fontsize=8)
        step = layer_step(len(layers))
        idx = [k for k, x in enumerate(layers) if int(x) % step == 0]
        ax.set_xticks(idx, [str(layers[k]) for k in idx], fontsize=8)
        ax.set_title(SHORT[role], fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02).ax.tick_params(labelsize=8)
    axes[-1, 0].set_xlabel("layer")
    fig.tight_layout()
    return fig


@drawer("mass_split")
def mass_split(frames, params):
    """Per layer: same-field, other-field and unnamed mass (and the learned sinks' mass, where a model has them) as
    stacked bars, and the first key's mass."""
    m = frames["masses"]
    roles = [r for r in ("baseline", "variant", "run") if r in set(m["role"])]
    fig, axes = plt.subplots(1, len(roles), figsize=(4.6 * len(roles) + 1.4, 3.6), squeeze=False, sharey=True)
    labels = params.get("labels", {})
    for ax, role in zip(axes[0], roles):
        t = m[m["role"] == role].sort_values("layer")
        x = t["layer"].to_numpy()
        bottom = np.zeros(len(t))
        parts = [("sfm", "same field (S)", "#4C72B0"), ("cross_mass", "other named fields (C)", "#8FB0D9"),
                 ("unnamed_mass", "outside named fields (U)", "#DD8452")]
        if "sink_mass" in m and float(m["sink_mass"].max()) > 0:  # learned attention sinks: the rest of each row
            parts.append(("sink_mass", "learned sinks (K)", "#BBBBBB"))
        for col, name, color in parts:
            v = t[col].to_numpy(float)
            ax.bar(x, v, bottom=bottom, color=color, width=0.8, label=name)
            bottom += v
        ax.plot(x, t["first_mass"].to_numpy(float), color="black", marker=".", lw=1, label="first key")
        ax.set(xlabel="layer", ylabel="attention mass" if role == roles[0] else "", ylim=(0, 1.05),
               title=plain(labels.get(role, role)))
        layer_ticks(ax, x)
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


def _index_ticks(ax, values, axis: str, most: int) -> None:
    """Ticks of a heatmap axis (positions 0..n-1 labelled by ``values``), thinned like a layer axis."""
    step = layer_step(len(values), most)
    idx = [k for k, v in enumerate(values) if int(v) % step == 0]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(idx, [str(values[k]) for k in idx])


def head_heatmaps(hs: pd.DataFrame, labels: dict):
    """Head-level SFM (layer x head) for both models and their difference (no cell labels past 8 heads or
    12 layers; then the panels share the page's width and their ticks are thinned)."""
    roles = [r for r in ("baseline", "variant", "difference", "run") if r in set(hs["role"])]
    n_layers, n_heads = hs["layer"].nunique(), hs["head"].nunique()
    big = n_heads > 8 or n_layers > 12
    panel = DISPLAY_PX / 130 / len(roles)  # inches per role when the figure is as wide as the page
    fig, axes = plt.subplots(1, len(roles), squeeze=False,
                             figsize=(3.7 * len(roles) if not big else panel * len(roles),
                                      3.2 if not big else 1.6 + 0.2 * n_layers))
    axes = axes[0]
    dmax = max(1e-9, float(hs.loc[hs["role"] == "difference", "sfm"].abs().max()))
    for ax, role in zip(axes, roles):
        m = hs[hs["role"] == role].pivot(index="layer", columns="head", values="sfm")
        kw = dict(vmin=-dmax, vmax=dmax, cmap="RdBu_r") if role == "difference" else dict(vmin=0, vmax=1, cmap="viridis")
        heat(ax, m, cbar=True, annot=not big, **kw)
        if big:
            ax.set_aspect("auto")
            _index_ticks(ax, list(m.columns), "x", 6)
            _index_ticks(ax, list(m.index), "y", 15)
            ax.tick_params(labelsize=8)
            ax.figure.axes[-1].tick_params(labelsize=8)  # its colour bar
        ax.set(title=SHORT[role], xlabel="head", ylabel="layer")
    fig.tight_layout()
    return fig


@drawer("paired_dots")
def paired_dots(frames, params):
    """Per layer: every example's baseline and variant value joined by a line (the paired distribution)."""
    d = frames["pairs"]
    layers = sorted(d["layer"].unique())
    cols = min(len(layers), 6)
    rows = -(-len(layers) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.9 * cols + 0.8, 2.8 * rows), squeeze=False, sharey=True)
    for ax, layer in zip(axes.ravel(), layers):
        g = d[d["layer"] == layer]
        from matplotlib.collections import LineCollection

        xs = np.array([0.0, 1.0])
        up = (g["diff"] > 0).to_numpy()
        bv = g[["baseline", "variant"]].to_numpy()
        segs = np.stack([np.broadcast_to(xs, bv.shape), bv], axis=-1)  # (examples, 2 points, xy): one collection
        colors = [PALETTE["variant"] if u else PALETTE["baseline"] for u in up]
        ax.add_collection(LineCollection(segs, colors=colors, alpha=0.25, linewidths=0.8))
        ax.plot(xs, [g["baseline"].mean(), g["variant"].mean()], color="black", lw=2.2, marker="o")
        ax.set_xticks(xs, ["base", "var"])
        ax.set_xlim(-0.25, 1.25)
        ax.set(title=f"L{layer}: {int(up.sum())}/{len(g)} up")
    axes[0][0].set_ylabel("SFM per example")
    for ax in axes.ravel()[len(layers):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


@drawer("run_profile")
def run_profile(frames, params):
    """One run: SFM and entropy per layer."""
    t = frames["layers"].sort_values("layer")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    a.plot(t["layer"], t["sfm"], marker="o", color=PALETTE["baseline"])
    a.set(xlabel="layer", ylabel="same-field mass", title="Layer profile")
    b.plot(t["layer"], t["entropy"], marker="o", color="#55A868")
    b.set(xlabel="layer", ylabel="entropy (nats)", title="Attention entropy")
    for ax in (a, b):
        layer_ticks(ax, t["layer"])
    fig.tight_layout()
    return fig


@drawer("word_map")
def _word_map(frames, params):
    return word_map(frames["word_map"], params.get("labels", {}), layout=params.get("layout", "fixed"))


def word_map(wm, labels: dict, layout: str = "fixed"):
    """Word-level attention of one example: rows = layers; baseline, variant, difference.

    The panels share their words, so only the outer ones are labelled (query words on the left, key
    words below), and the two scales are drawn once each: baseline and variant share one, the
    difference has its own (a colour bar per panel repeated the same scale four times).
    ``layout="fixed"`` places them by :func:`word_map_boxes`; ``"constrained"`` leaves it to matplotlib's
    constrained layout, for a caller that changes the text's size after drawing (a paper's figure).
    """
    n = len(wm.words)
    rows = len(wm.layers)
    size = 7 if n <= 30 else 6
    ticks = [plain(w if len(w) <= 14 else w[:13] + "…") for w in wm.words]
    if layout == "constrained":
        fig = plt.figure(figsize=(3.6 * 3 + 1, 3.4 * rows + 0.6), layout="constrained")
        grid = fig.add_gridspec(rows, 3)
        place = {"panel": lambda i, j: fig.add_subplot(grid[i, j]), "bar": lambda k, axes: dict(ax=axes, shrink=0.8)}
    else:
        fig = plt.figure()
        boxes = word_map_boxes(fig, rows, longest_label(fig, ticks, size))
        place = {"panel": lambda i, j: fig.add_axes(boxes["panels"][i][j]),
                 "bar": lambda k, axes: dict(cax=fig.add_axes(boxes["bars"][k]))}
    panels = np.empty((rows, 3), dtype=object)
    vmax = max(float(np.max(wm.matrices[(r, layer)])) for r in ("baseline", "variant") for layer in wm.layers)
    dmax = max(1e-9, max(float(np.abs(wm.matrices[("difference", layer)]).max()) for layer in wm.layers))
    bounds = [i for i in range(1, n) if wm.word_fields[i] != wm.word_fields[i - 1]]
    shade = ["0.55" if f == "unnamed" else "black" for f in wm.word_fields]  # unnamed tokens (specials) greyed
    scales = {}
    for i, layer in enumerate(wm.layers):
        for j, role in enumerate(("baseline", "variant", "difference")):
            ax = panels[i, j] = place["panel"](i, j)
            kw = dict(vmin=-dmax, vmax=dmax, cmap="RdBu_r") if role == "difference" else dict(vmin=0, vmax=vmax, cmap="viridis")
            scales[role == "difference"] = heat(ax, pd.DataFrame(wm.matrices[(role, layer)]), annot=False,
                                                ticklabels=ticks, label_x=i == rows - 1, label_y=j == 0, **kw)
            for bnd in bounds:
                ax.axhline(bnd - 0.5, color="white" if role != "difference" else "black", lw=1)
                ax.axvline(bnd - 0.5, color="white" if role != "difference" else "black", lw=1)
            ax.tick_params(labelsize=size)
            for lab, c in zip(ax.get_xticklabels(), shade):
                lab.set_color(c)
            for lab, c in zip(ax.get_yticklabels(), shade):
                lab.set_color(c)
            ax.set(title=f"L{layer} {SHORT[role]}", xlabel="key word" if i == rows - 1 else "",
                   ylabel="query word" if j == 0 else "")
    # a colour bar beside the panels it scales: baseline and variant share one, the difference has its own
    fig.colorbar(scales[False], label="attention (baseline, variant)", **place["bar"](0, list(panels[:, :2].ravel())))
    fig.colorbar(scales[True], label="variant − baseline", **place["bar"](1, list(panels[:, 2])))
    return fig


@drawer("lengths")
def _lengths(frames, params):
    return lengths(frames["examples"])


def lengths(ex: pd.DataFrame):
    """Evaluated lengths (histogram) and the per-example Δ SFM against length with a running mean."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    one = ex.drop_duplicates("example_id")
    a.hist(one["length"], bins=min(30, max(5, one["length"].nunique())), color="#4C72B0")
    a.set(xlabel="evaluated tokens", ylabel="examples", title="Length distribution")
    integer_ticks(a.yaxis)
    layers = sorted(ex["layer"].unique())
    colors = layer_colors(len(layers))
    window = int(ex["window"].iloc[0])
    for c, layer in zip(colors, layers):
        t = ex[ex["layer"] == layer]
        b.scatter(t["length"], t["diff"], s=8, color=c, alpha=0.35)
        b.plot(t["length"], t["running_mean"], color=c, lw=2, label=f"layer {layer}")
    b.axhline(0, color="0.4", ls="--", lw=1)
    b.set(xlabel="evaluated tokens", ylabel="Δ SFM (variant − baseline)", title=f"Δ vs length (running mean of {window})")
    layer_key(b, colors, layers)
    fig.tight_layout()
    return fig


