"""A figure as a list of marks (lines, dots, rectangles, text) in points, written as SVG with no plotting library,
or replayed onto a matplotlib figure for PNG and PDF.

The report page's figures are drawn here: matplotlib's import and its layout machinery were 1.7 s of a
2 x 64 report's 3 s (docs/performance.md). A :class:`Canvas` is drawn once and serves every format, so the
page's SVG, ``--figures png,pdf`` and ``routestats figure`` show the same drawing. Coordinates are points
(1/72 in) from the top left; text is laid out with DejaVu Sans' advance widths (:func:`text_width`), the
widest of the fonts the page asks for, so a label measured here is never wider on the page.

>>> c = Canvas(100, 40)
>>> c.line(0, 20, 100, 20, color="#cccccc")
>>> box = c.text(50, 20, "a < b", size=9, anchor="middle")  # (x0, y0, x1, y1): 24.5 pt wide, centred
>>> [round(v, 1) for v in box]
[37.8, 14.8, 62.2, 25.2]
>>> svg = c.svg()
>>> svg.startswith("<svg") and "a &lt; b" in svg
True
>>> round(text_width("layer", 10), 2)  # l 28 + a 61 + y 59 + e 62 + r 41 hundredths of an em
25.1
"""

from __future__ import annotations

import base64
import html
import struct
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Canvas", "inline", "text_width", "colormap", "rgb_hex", "hex_rgb", "png_bytes", "FONT", "INK", "GRID", "PALETTES"]

SVG_NS = 'xmlns="http://www.w3.org/2000/svg"'  # a file's; an SVG inline in HTML goes without it
PAGE_STYLE = "max-width:100%;height:auto"  # an SVG of the page shrinks with it, keeping its aspect
FONT = "DejaVu Sans, Verdana, Arial, Helvetica, sans-serif"
INK = "#262626"  # seaborn's text colour (.15)
GRID = "#cccccc"  # seaborn whitegrid's grid and axes edge (.8)

# seaborn's qualitative palettes (seaborn 0.13), as hex; reports.theme.palette serves them as RGB
PALETTES = {
    "deep": ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
             "#64b5cd"],
    "colorblind": ["#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
                   "#56b4e9"],
}

# DejaVu Sans advance widths of ASCII 32..126 in 1/100 em (matplotlib's DejaVuSans.ttf, unhinted)
_ASCII = (32, 40, 46, 84, 64, 95, 78, 27, 39, 39, 50, 84, 32, 36, 32, 34, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
          34, 34, 84, 84, 84, 53, 100, 68, 69, 70, 77, 63, 58, 77, 75, 29, 29, 66, 56, 86, 75, 79, 60, 79, 69, 63,
          61, 73, 68, 99, 69, 61, 69, 39, 34, 39, 84, 50, 50, 61, 63, 55, 63, 62, 35, 63, 63, 28, 28, 58, 28, 97,
          63, 61, 63, 63, 41, 52, 39, 63, 59, 82, 59, 59, 52, 64, 34, 64, 84)


def text_width(s: str, size: float) -> float:
    """The width in points of ``s`` at ``size`` points in DejaVu Sans (other letters: 0.7 em, wide ones 1 em).

    >>> text_width("00", 10), text_width("—", 10)
    (12.8, 7.0)
    """
    units = 0
    for ch in str(s):
        o = ord(ch)
        if 32 <= o < 127:
            units += _ASCII[o - 32]
        else:
            units += 100 if unicodedata.east_asian_width(ch) in "WF" else 70
    return units * size / 100


# colour maps as anchors interpolated linearly (matplotlib's viridis at 17 points: within 5/255 of its 256-entry
# table; RdBu_r is ColorBrewer's 11 colours, which is how matplotlib defines it)
_MAPS = {
    "viridis": "440154 48186a 472d7b 424086 3b528b 33638d 2c728e 26828e 21918c 1fa088 28ae80 3fbc73 5ec962 84d44b "
               "addc30 d8e219 fde725",
    "RdBu_r": "053061 2065ab 4393c3 90c4dd d1e5f0 f7f6f6 fddbc7 f3a481 d6604d b1182b 67001f",
}


def colormap(name: str, t) -> np.ndarray:
    """RGB rows in [0, 1] of map ``name`` (``viridis``, ``RdBu_r``) at positions ``t`` (clipped to [0, 1]).

    >>> colormap("viridis", [0.0, 1.0]).round(3).tolist()
    [[0.267, 0.004, 0.329], [0.992, 0.906, 0.145]]
    """
    anchors = np.array([[int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)] for h in _MAPS[name].split()])
    x = np.linspace(0, 1, len(anchors))
    t = np.clip(np.asarray(t, dtype=float), 0, 1)
    return np.stack([np.interp(t, x, anchors[:, c]) for c in range(3)], axis=-1)


def rgb_hex(rgb) -> str:
    """``#rrggbb`` of an RGB triple in [0, 1].

    >>> rgb_hex((1.0, 0.5, 0.0))
    '#ff8000'
    """
    return "#" + "".join(f"{int(round(float(v) * 255)):02x}" for v in rgb[:3])


def hex_rgb(h: str) -> tuple:
    """The RGB triple in [0, 1] of ``#rrggbb``.

    >>> hex_rgb("#ff8000")
    (1.0, 0.5019607843137255, 0.0)
    """
    return tuple(int(h[i:i + 2], 16) / 255 for i in (1, 3, 5))


def png_bytes(rgb) -> bytes:
    """A PNG file of ``rgb`` (rows x columns x 3, in [0, 1]), 8-bit truecolour, written with zlib alone.

    >>> png_bytes([[[1.0, 0.0, 0.0]]])[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    px = np.clip(np.round(np.asarray(rgb, dtype=float) * 255), 0, 255).astype(np.uint8)
    h, w = px.shape[:2]
    raw = b"".join(b"\x00" + px[i].tobytes() for i in range(h))  # filter type 0 (none) before each row

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def _n(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:.0f}"


@dataclass
class Canvas:
    """Marks on a ``width`` x ``height`` point page; draw with the methods, then :meth:`svg` or :meth:`figure`.

    ``texts`` keeps every text's box (x0, y0, x1, y1, size, text, group) so tests can check what the page shows.
    """

    width: float
    height: float
    marks: list = field(default_factory=list)
    texts: list = field(default_factory=list)

    def line(self, x0, y0, x1, y1, color=INK, width=1.0, dash=None, alpha=1.0) -> None:
        """One straight line."""
        self.marks.append(("path", [(x0, y0, x1, y1)], color, width, dash, alpha))

    def segments(self, segs, color=INK, width=1.0, alpha=1.0) -> None:
        """Many straight lines of one colour: rows of (x0, y0, x1, y1), one path."""
        self.marks.append(("path", [tuple(s) for s in np.asarray(segs, dtype=float).reshape(-1, 4)], color, width,
                           None, alpha))

    def polyline(self, xs, ys, color=INK, width=1.5, alpha=1.0, dash=None) -> None:
        """A line through the points, in order (NaN points break it); ``dash`` (on, off) points."""
        self.marks.append(("poly", np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), color, width, alpha,
                           dash))

    def dots(self, xs, ys, radius=2.0, color=INK, alpha=1.0) -> None:
        """Filled round dots of one colour and size."""
        self.marks.append(("dots", np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), radius, color, alpha))

    def polygon(self, xs, ys, fill, alpha=1.0) -> None:
        """A filled polygon through the points (a band between two lines)."""
        self.marks.append(("polygon", np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), fill, alpha))

    def rect(self, x, y, w, h, fill=None, stroke=None, width=1.0, hatch=False) -> None:
        """A rectangle from its top-left corner; ``hatch`` draws diagonal grey lines on a light fill."""
        self.marks.append(("rect", x, y, w, h, fill, stroke, width, hatch))

    def image(self, x, y, w, h, rgb) -> None:
        """An image of ``rgb`` (rows x columns x 3, in [0, 1]) stretched over the rectangle, each pixel a crisp cell:
        a heat map's colours in one mark (a rectangle per cell was 95 bytes a cell: 0.9 MB for a 40-word map)."""
        self.marks.append(("image", x, y, w, h, np.asarray(rgb, dtype=float)))

    def text(self, x, y, s, size=9.0, color=INK, anchor="start", valign="middle", rotate=0, bold=False,
             group=None) -> tuple:
        """Text at (x, y): ``anchor`` start/middle/end along it, ``valign`` top/middle/baseline/bottom across it;
        ``rotate`` 0 or 90 (reads upward). ``group`` names the axis whose labels must not overlap. Returns its box."""
        s = str(s)
        w, h = text_width(s, size), size * 1.16
        along = {"start": 0.0, "middle": 0.5, "end": 1.0}[anchor] * w
        across = {"top": 0.0, "middle": 0.5, "baseline": 0.76, "bottom": 1.0}[valign] * h
        if rotate:
            box = (x - across, y - w + along, x - across + h, y + along)
        else:
            box = (x - along, y - across, x - along + w, y - across + h)
        self.marks.append(("text", x, y, s, size, color, anchor, valign, rotate, bold))
        self.texts.append((*box, size, s, group))
        return box

    def problems(self) -> list[str]:
        """What would not read: texts (by their measured boxes) reaching outside the page, and texts of one group
        (an axis's tick labels) overlapping by more than a point each way.

        >>> c = Canvas(50, 20)
        >>> _ = c.text(0, 10, "10", group="x"); _ = c.text(5, 10, "11", group="x"); _ = c.text(45, 10, "wide")
        >>> c.problems()
        ["outside the page: 'wide'", "overlapping: '10' and '11'"]
        """
        out = [f"outside the page: {t[5]!r}" for t in self.texts
               if t[0] < -0.5 or t[1] < -0.5 or t[2] > self.width + 0.5 or t[3] > self.height + 0.5]
        groups: dict = {}
        for t in self.texts:
            if t[6]:
                groups.setdefault(t[6], []).append(t)
        for ts in groups.values():
            ts = sorted(ts, key=lambda t: (t[0], t[1]))
            for i, a in enumerate(ts):
                for b in ts[i + 1:]:
                    if b[0] > a[2]:
                        break
                    if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1:
                        out.append(f"overlapping: {a[5]!r} and {b[5]!r}")
        return out

    def svg(self, points: bool = False) -> str:
        """The page as an SVG file's text: on a web page 4/3 CSS pixels a point (scaled down with the page's width,
        :data:`PAGE_STYLE`), or sized in points (``points``: a paper's figure file). :func:`inline` makes it an element
        of an HTML page."""
        w, h = self.width, self.height
        size = f'width="{_n(w)}pt" height="{_n(h)}pt"' if points else \
            f'width="{_n(w * 4 / 3)}" height="{_n(h * 4 / 3)}" style="{PAGE_STYLE}"'
        out = [f'<svg {SVG_NS} viewBox="0 0 {_n(w)} {_n(h)}" {size} font-family="{FONT}">',
               '<defs><pattern id="rs-hatch" width="4" height="4" patternUnits="userSpaceOnUse" '
               'patternTransform="rotate(45)"><rect width="4" height="4" fill="#ededed"/>'
               '<line x1="0" y1="0" x2="0" y2="4" stroke="#999999" stroke-width="1"/></pattern></defs>',
               f'<rect width="{_n(w)}" height="{_n(h)}" fill="white"/>']
        for m in self.marks:
            out.append(_SVG[m[0]](*m[1:]))
        out.append("</svg>")
        return "\n".join(out)

    def figure(self):
        """The same marks on a matplotlib figure (for PNG and PDF): lines, dots, patches and texts placed in the
        figure's own coordinates, no axes."""
        from matplotlib.figure import Figure
        from matplotlib.transforms import Affine2D

        fig = Figure(figsize=(self.width / 72, self.height / 72))
        pt = Affine2D().scale(1 / 72, -1 / 72).translate(0, self.height / 72) + fig.dpi_scale_trans
        for m in self.marks:
            _MPL[m[0]](fig, pt, *m[1:])
        return fig

    def save(self, folder: Path, name: str, formats=("svg",), dpi: int = 130) -> dict:
        """Write ``name.<format>`` per format (svg, png, pdf) under ``folder``; format -> bytes."""
        import io

        folder.mkdir(parents=True, exist_ok=True)
        out = {}
        fig = None
        for fmt in formats:
            if fmt == "svg":
                data = self.svg().encode()
            else:
                fig = fig or self.figure()
                buf = io.BytesIO()
                fig.savefig(buf, format=fmt, dpi=dpi, **({"pil_kwargs": {"compress_level": 2}} if fmt == "png" else {}))
                data = buf.getvalue()
            (folder / f"{name}.{fmt}").write_bytes(data)
            out[fmt] = data
        return out


def inline(svg: str, style: str | None = None) -> str:
    """An SVG file's text (:meth:`Canvas.svg`) as an element of an HTML page: without the namespace a file needs (and
    a page's self-containment test reads as a link), with ``style`` in place of the page's own when given.

    >>> inline(Canvas(10, 10).svg(), "width:40px").split(" font-family")[0]
    '<svg viewBox="0 0 10 10" width="13.3" height="13.3" style="width:40px;height:auto"'
    """
    svg = svg.replace(" " + SVG_NS, "", 1)
    return svg if style is None else svg.replace(f'style="{PAGE_STYLE}"', f'style="{style};height:auto"', 1)


# characters XML 1.0 does not allow (C0 controls but tab and newline, and the two non-characters): a word of a model's
# text holding one would make the .svg file unreadable to a strict parser
_NOT_XML = {c: "\ufffd" for c in [*range(0, 9), 11, 12, *range(14, 32), 0xFFFE, 0xFFFF]}


def _dash(dash) -> str:
    return f' stroke-dasharray="{dash[0]:g} {dash[1]:g}"' if dash else ""


def _opacity(alpha, kind="stroke") -> str:
    return f' {kind}-opacity="{alpha:g}"' if alpha < 1 else ""


def _svg_path(segs, color, width, dash, alpha) -> str:
    d = "".join(f"M{a:.1f} {b:.1f}L{c:.1f} {e:.1f}" for a, b, c, e in segs)
    return f'<path d="{d}" stroke="{color}" stroke-width="{width:g}" fill="none"{_dash(dash)}{_opacity(alpha)}/>'


def _svg_poly(xs, ys, color, width, alpha, dash) -> str:
    parts, pen = [], "M"
    for x, y in zip(xs, ys):
        if np.isnan(x) or np.isnan(y):
            pen = "M"
            continue
        parts.append(f"{pen}{_n(x)} {_n(y)}")
        pen = "L"
    return (f'<path d="{"".join(parts)}" stroke="{color}" stroke-width="{width:g}" fill="none" '
            f'stroke-linejoin="round"{_dash(dash)}{_opacity(alpha)}/>')


def _svg_polygon(xs, ys, fill, alpha) -> str:
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs.tolist(), ys.tolist()) if np.isfinite(x) and np.isfinite(y))
    return f'<polygon points="{pts}" fill="{fill}" stroke="none"{_opacity(alpha, "fill")}/>'


def _svg_dots(xs, ys, r, color, alpha) -> str:
    # a dot is a zero-length round-capped line: 10-14 bytes a dot, against ~45 for a <circle>
    ok = np.isfinite(xs) & np.isfinite(ys)
    d = "".join(f"M{x:.1f} {y:.1f}h0" for x, y in zip(xs[ok].tolist(), ys[ok].tolist()))
    return f'<path d="{d}" stroke="{color}" stroke-width="{2 * r:g}" stroke-linecap="round"{_opacity(alpha)}/>'


def _svg_rect(x, y, w, h, fill, stroke, width, hatch) -> str:
    paint = "url(#rs-hatch)" if hatch else (fill or "none")
    edge = f' stroke="{stroke}" stroke-width="{width:g}"' if stroke else ""
    # crisp edges: anti-aliased neighbouring cells of a heat map would show hairlines of the background between them
    return (f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}" fill="{paint}"{edge} '
            'shape-rendering="crispEdges"/>')


def _svg_image(x, y, w, h, rgb) -> str:
    data = base64.b64encode(png_bytes(rgb)).decode()
    return (f'<image x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}" preserveAspectRatio="none" '
            f'image-rendering="optimizeSpeed" style="image-rendering:pixelated" href="data:image/png;base64,{data}"/>')


_BASELINE = {"top": "hanging", "middle": "central", "baseline": "auto", "bottom": "text-after-edge"}


def _svg_text(x, y, s, size, color, anchor, valign, rotate, bold) -> str:
    turn = f' transform="rotate(-90 {_n(x)} {_n(y)})"' if rotate else ""
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size:g}" fill="{color}" text-anchor="{anchor}" '
            f'dominant-baseline="{_BASELINE[valign]}"{turn}{weight}>{html.escape(s.translate(_NOT_XML), quote=False)}'
            '</text>')


_SVG = {"path": _svg_path, "poly": _svg_poly, "polygon": _svg_polygon, "dots": _svg_dots, "rect": _svg_rect,
        "image": _svg_image, "text": _svg_text}


def _mpl_path(fig, pt, segs, color, width, dash, alpha) -> None:
    from matplotlib.collections import LineCollection

    lines = [((a, b), (c, e)) for a, b, c, e in segs]
    fig.add_artist(LineCollection(lines, colors=color, linewidths=width, alpha=alpha, transform=pt,
                                  linestyles=(0, dash) if dash else "solid"))


def _mpl_poly(fig, pt, xs, ys, color, width, alpha, dash) -> None:
    from matplotlib.lines import Line2D

    fig.add_artist(Line2D(xs, ys, color=color, lw=width, alpha=alpha, transform=pt, solid_joinstyle="round",
                          ls=(0, dash) if dash else "-"))


def _mpl_polygon(fig, pt, xs, ys, fill, alpha) -> None:
    from matplotlib.patches import Polygon

    ok = np.isfinite(xs) & np.isfinite(ys)
    fig.add_artist(Polygon(np.column_stack([xs[ok], ys[ok]]), closed=True, facecolor=fill, edgecolor="none",
                           alpha=alpha, transform=pt))


def _mpl_dots(fig, pt, xs, ys, r, color, alpha) -> None:
    from matplotlib.lines import Line2D

    fig.add_artist(Line2D(xs, ys, ls="none", marker="o", ms=2 * r, mew=0, color=color, alpha=alpha, transform=pt))


def _mpl_rect(fig, pt, x, y, w, h, fill, stroke, width, hatch) -> None:
    from matplotlib.patches import Rectangle

    fig.add_artist(Rectangle((x, y), w, h, transform=pt, facecolor="#ededed" if hatch else (fill or "none"),
                             edgecolor=("#999999" if hatch else stroke) or "none", lw=0 if hatch else width,
                             hatch="///" if hatch else None))


def _mpl_image(fig, pt, x, y, w, h, rgb) -> None:
    from matplotlib.image import BboxImage
    from matplotlib.transforms import Bbox, TransformedBbox

    box = TransformedBbox(Bbox([[x, y + h], [x + w, y]]), pt)  # the image's first row at the top
    im = BboxImage(box, interpolation="nearest", resample=False)
    im.set_data(np.asarray(rgb, dtype=float)[::-1])
    fig.add_artist(im)


def _mpl_text(fig, pt, x, y, s, size, color, anchor, valign, rotate, bold) -> None:
    va = {"top": "top", "middle": "center", "baseline": "baseline", "bottom": "bottom"}[valign]
    ha = {"start": "left", "middle": "center", "end": "right"}[anchor]
    fig.text(x, y, s, transform=pt, fontsize=size, color=color, ha=ha, va=va, rotation=90 if rotate else 0,
             fontweight="bold" if bold else "normal", rotation_mode="anchor",  # aligned as read, then turned
             family="DejaVu Sans")


_MPL = {"path": _mpl_path, "poly": _mpl_poly, "polygon": _mpl_polygon, "dots": _mpl_dots, "rect": _mpl_rect,
        "image": _mpl_image, "text": _mpl_text}
