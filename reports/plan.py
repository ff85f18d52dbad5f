"""The drawer of the plan report's power curve; every estimate comes finished from the core."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from reports import figures as F
from reports.axes import layer_colors

DRAWERS: dict = {}
drawer = F.registrar(DRAWERS)


@drawer("power_curve")
def power_curve(frames, params):
    """Power against the size (examples or seeds): one line per layer with its Monte Carlo error band, the
    hardest layer (what the plan reaches) in black, every layer at once dotted, the target dashed, the pilot's and
    the planned size marked."""
    curve = frames["curve"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    layers = [l for l in curve["layer"].unique() if str(l).isdigit()]
    for c, layer in zip(layer_colors(len(layers)), layers):
        g = curve[curve["layer"] == layer].sort_values("n")
        ax.plot(g["n"], g["power"], color=c, marker="o", ms=3, lw=1.2, label=f"layer {layer}")
        ax.fill_between(g["n"], g["power"] - 2 * g["se"], g["power"] + 2 * g["se"], color=c, alpha=0.15, lw=0)
    for name, style in (("hardest layer", "-"), ("every layer", ":")):
        g = curve[curve["layer"] == name].sort_values("n")
        if len(g):
            ax.plot(g["n"], g["power"], color="black", lw=2, ls=style, label=name)
    ax.axhline(params["target"], color="0.3", ls="--", lw=1)
    ax.text(ax.get_xlim()[0], params["target"], f" target {params['target']:.0%}", va="bottom", fontsize=8)
    marks = (("pilot", params.get("pilot"), "0.5", ":"), ("planned", params.get("planned"), "#C44E52", "-"))
    for label, x, color, style in marks:
        if x is not None and np.isfinite(x):
            ax.axvline(x, color=color, ls=style, lw=1.2)
            ax.text(x, 0.98, f" {label} {int(x)} ", rotation=90, va="top", ha="right", fontsize=8, color=color,
                    transform=ax.get_xaxis_transform())
    what = params.get("x", "examples")
    ax.set(xlabel=f"{what}" + (" per pair" if what == "examples" else ""), ylabel="power", ylim=(0, 1.02),
           title=f"Power of the report's test against the number of {what}")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig
