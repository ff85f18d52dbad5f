"""The page's drawing layer (reports.canvas, reports.chart) against independent implementations: PIL decodes its PNGs,
matplotlib measures its texts and holds the colour maps it copies, seaborn the palettes, an XML parser its SVG."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from reports.canvas import Canvas, colormap, png_bytes, text_width
from reports.chart import nice_ticks, tick_labels


def test_png_bytes_decode_to_the_pixels_they_were_given():
    from PIL import Image

    rgb = np.random.default_rng(1).random((7, 5, 3))
    img = np.asarray(Image.open(io.BytesIO(png_bytes(rgb))).convert("RGB"))
    # expected: each channel rounded to the nearest of 256 levels, as PIL reads the file back
    np.testing.assert_array_equal(img, np.round(rgb * 255).astype(np.uint8))


@pytest.mark.parametrize("name", ["viridis", "RdBu_r"])
def test_colour_maps_follow_matplotlibs(name):
    from matplotlib import colormaps

    t = np.linspace(0, 1, 501)
    # expected: matplotlib's own map at the same positions; viridis is kept as 17 anchors (within 5.3/255 of its
    # 256-entry table), RdBu_r is ColorBrewer's 11 colours, as matplotlib defines it (within 2.4/255)
    assert np.abs(colormap(name, t) - colormaps[name](t)[:, :3]).max() < 6 / 255


@pytest.mark.parametrize("text", ["layer", "Δ SFM (variant − baseline)", "0.0025", "supercalifragilistic", "W" * 9,
                                  "[CLS] wörd"])
def test_text_width_is_dejavu_sans_as_matplotlib_measures_it(text):
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer = RendererAgg(100, 100, 720)  # 720 dpi: ten pixels a point, so hinting rounds to a tenth of a point
    w, _, _ = renderer.get_text_width_height_descent(text, FontProperties(family="DejaVu Sans", size=10), False)
    w /= 10
    # expected: matplotlib's layout of the same string in the same font (kerning and hinting are the difference)
    assert text_width(text, 10) == pytest.approx(w, rel=0.04, abs=0.6)


def test_the_svg_is_well_formed_and_escapes_text():
    c = Canvas(100, 50)
    c.rect(0, 0, 10, 10, hatch=True)
    c.dots([1, np.nan, 3], [1, 2, np.nan], 2, "#ff0000")
    c.text(5, 5, "a < b & c", rotate=90)
    c.text(5, 5, "tab\there bell\x07")  # a word of a model's text may hold a control character XML does not allow
    c.image(0, 0, 10, 10, np.zeros((2, 2, 3)))
    root = ET.fromstring(c.svg())
    texts = [e.text for e in root.iter() if e.tag.endswith("text")]
    # the parser reads back the text as written; the one character XML cannot hold becomes U+FFFD
    assert texts == ["a < b & c", "tab\there bell\ufffd"]
    (dots,) = [e for e in root.iter() if e.tag.endswith("path")]
    assert dots.get("d") == "M1.0 1.0h0"  # points with a NaN coordinate are left out


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6), st.integers(2, 10))
def test_nice_ticks_are_round_evenly_spaced_and_inside_the_range(lo, rel, most):
    span = rel * max(1.0, abs(lo))  # an axis spans at least a millionth of its values (float64 keeps 1e-16)
    hi = lo + span
    ticks = nice_ticks(lo, hi, most)
    assert 1 <= len(ticks) <= most + 1
    if len(ticks) >= 2:
        steps = np.diff(ticks)
        assert np.allclose(steps, steps[0], rtol=1e-6)
        mantissa = steps[0] / 10 ** np.floor(np.log10(steps[0]))
        assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5, 10)) < 1e-6
    tol = 1e-9 * max(1.0, abs(lo), abs(hi))
    assert all(lo - tol <= t <= hi + tol for t in ticks)


def test_tick_labels_share_their_decimals_and_use_a_true_minus():
    # expected: written out by hand, each list at the decimals of its finest tick, U+2212 for the minus, "0" for zero
    assert tick_labels([-0.1, 0.0, 0.1, 0.2]) == ["−0.1", "0", "0.1", "0.2"]
    assert tick_labels([0.0, 0.3, 0.6000000000000001]) == ["0", "0.3", "0.6"]


def test_layer_colours_are_seaborns():
    import seaborn as sns

    from reports.axes import layer_colors

    cb = sns.color_palette("colorblind", 10)
    # expected: seaborn's colour-blind palette in the order the axes module picks (no two alike first)
    assert np.allclose(layer_colors(4), [cb[i] for i in (0, 1, 2, 4)])
    # beyond 8 layers: seaborn's viridis sampled at n inner points, within the anchors' 5.3/255
    assert np.abs(np.array(layer_colors(12)) - np.array(sns.color_palette("viridis", 12))).max() < 6 / 255
