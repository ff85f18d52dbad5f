"""The interactive attention explorer: a self-contained HTML widget (no network, no library).

:data:`WIDGETS` maps a :class:`routestats.report.Figure` kind to ``fn(figure, element_id) -> HTML``;
the renderer writes such figures into the page instead of drawing them. The explorer shows the
words of one example coloured by field; clicking a word shades every word by the attention the
clicked word (the query) pays it, for a chosen layer and head (or the head mean) in the baseline,
the variant or their difference. Its data are the word-level matrices of
:meth:`routestats.compose.pair.build.WordMap.explorer_frames`, embedded as JSON.
"""

from __future__ import annotations

import html
import json

import numpy as np

FIELD_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974")

SCRIPT = r"""
(function () {
  function shade(w, view, max) {
    if (view === "difference") {
      var a = Math.min(1, Math.abs(w) / (max || 1));
      return w >= 0 ? "rgba(178, 24, 43, " + a.toFixed(3) + ")" : "rgba(33, 102, 172, " + a.toFixed(3) + ")";
    }
    return "rgba(68, 1, 84, " + Math.min(1, w / (max || 1)).toFixed(3) + ")";
  }
  document.querySelectorAll(".attention-explorer").forEach(function (root) {
    if (root.getAttribute("data-bound")) return;  // one script per explorer; bind each once
    root.setAttribute("data-bound", "1");
    var data = JSON.parse(root.querySelector("script.explorer-data").textContent);
    var layerSel = root.querySelector("select.explorer-layer");
    var headSel = root.querySelector("select.explorer-head");
    var views = root.querySelectorAll("button.explorer-view");
    var words = root.querySelectorAll(".explorer-word");
    var status = root.querySelector(".explorer-status");
    var state = {query: null, view: "variant"};
    function matrix(role, layer, head) {
      var per = data.attention[role][layer];
      if (head !== "mean") return per[+head];
      var U = data.words.length, out = [];
      for (var i = 0; i < U; i++) {
        out.push([]);
        for (var j = 0; j < U; j++) {
          var s = 0;
          for (var h = 0; h < per.length; h++) s += per[h][i][j];
          out[i].push(s / per.length);
        }
      }
      return out;
    }
    function row() {
      var layer = layerSel.value, head = headSel.value, q = state.query;
      var v = matrix("variant", layer, head)[q], b = matrix("baseline", layer, head)[q];
      if (state.view === "variant") return v;
      if (state.view === "baseline") return b;
      return v.map(function (x, j) { return x - b[j]; });
    }
    function draw() {
      root.setAttribute("data-view", state.view);
      views.forEach(function (b) { b.classList.toggle("on", b.getAttribute("data-view") === state.view); });
      if (state.query === null) {
        words.forEach(function (w) { w.style.background = ""; w.style.color = ""; w.removeAttribute("data-weight"); });
        return;
      }
      var r = row(), max = 0, best = -1;
      r.forEach(function (x, j) { if (Math.abs(x) > max) { max = Math.abs(x); best = j; } });
      words.forEach(function (w, j) {
        w.setAttribute("data-weight", r[j].toFixed(6));
        w.style.background = shade(r[j], state.view, max);
        w.style.color = (state.view !== "difference" && r[j] / (max || 1) > 0.55) ? "white" : "";
        w.classList.toggle("query", j === state.query);
      });
      var label = headSel.value === "mean" ? "mean of the heads" : "head " + headSel.value;
      status.textContent = "Layer " + layerSel.value + ", " + label + ", " + state.view + ": \u201c" +
        data.words[state.query] + "\u201d " + (state.view === "difference" ? "changed most on \u201c" :
        "attends most to \u201c") + data.words[best] + "\u201d (" + r[best].toFixed(3) + ").";
    }
    words.forEach(function (w, j) {
      w.addEventListener("click", function () { state.query = j; draw(); });
    });
    layerSel.addEventListener("change", draw);
    headSel.addEventListener("change", draw);
    views.forEach(function (b) {
      b.addEventListener("click", function () { state.view = b.getAttribute("data-view"); draw(); });
    });
    draw();
  });
})();
"""

STYLE = """
.attention-explorer { border: 1px solid var(--line, #ddd); padding: 10px 12px; margin: 8px 0 14px; }
.attention-explorer .explorer-controls { display: flex; gap: 14px; align-items: center; flex-wrap: wrap;
  font-size: 13px; margin-bottom: 8px; }
.attention-explorer button.explorer-view { border: 1px solid #999; background: white; padding: 2px 9px;
  cursor: pointer; font-size: 13px; }
.attention-explorer button.explorer-view.on { background: #333; color: white; }
.attention-explorer .explorer-words { line-height: 2.1; font-size: 15px; }
.attention-explorer .explorer-word { padding: 2px 4px; margin: 0 1px; cursor: pointer; border-bottom: 3px solid;
  border-radius: 2px; white-space: nowrap; }
.attention-explorer .explorer-word.query { outline: 2px solid #E3A900; }
.attention-explorer .explorer-status { font-size: 13px; color: var(--muted, #555); min-height: 1.3em; }
.attention-explorer .explorer-key { font-size: 12px; color: var(--muted, #555); margin: 0; }
.attention-explorer .explorer-legend span { margin-right: 12px; font-size: 12px; }
"""


def explorer_data(frames: dict) -> dict:
    """The compact JSON the script reads: words, fields, and attention[role][layer][head][query][key]."""
    words, att = frames["words"], frames["attention"]
    U = len(words)
    out = {"words": words["word"].tolist(), "fields": words["field"].tolist(), "attention": {}}
    for role in ("baseline", "variant"):
        t = att[att["role"] == role]
        layer, head = t["layer"].to_numpy(), t["head"].to_numpy()
        q, k, w = t["query_index"].to_numpy(), t["key_index"].to_numpy(), t["weight"].to_numpy()
        out["attention"][role] = {}
        for lyr in np.unique(layer):  # each layer's heads in order, zero where a cell has no row
            mine = layer == lyr
            heads = np.unique(head[mine])
            m = np.zeros((len(heads), U, U))
            m[np.searchsorted(heads, head[mine]), q[mine], k[mine]] = w[mine]
            out["attention"][role][str(int(lyr))] = np.round(m, 6).tolist()
    return out


def attention_explorer(figure, element_id: str) -> str:
    """HTML of one explorer (element id ``element_id``; the first of a page is ``attention-explorer``)."""
    data = explorer_data(dict(figure.frames))
    layers = sorted(data["attention"]["variant"], key=int)
    n_heads = len(data["attention"]["variant"][layers[0]])
    fields = list(dict.fromkeys(data["fields"]))
    colour = {f: ("#BBBBBB" if f == "unnamed" else FIELD_COLOURS[i % len(FIELD_COLOURS)]) for i, f in enumerate(fields)}
    words = "".join(
        f'<span class="explorer-word" data-i="{i}" data-field="{html.escape(f)}" style="border-color: {colour[f]}" '
        f'title="{html.escape(f)}">{html.escape(w)}</span> '
        for i, (w, f) in enumerate(zip(data["words"], data["fields"])))
    layer_opts = "".join(f'<option value="{lyr}"{" selected" if k == len(layers) - 1 else ""}>{lyr}</option>'
                         for k, lyr in enumerate(layers))
    head_opts = '<option value="mean">mean</option>' + "".join(f'<option value="{h}">{h}</option>' for h in range(n_heads))
    legend = "".join(f'<span style="border-bottom: 3px solid {colour[f]}">{html.escape(f)}</span>' for f in fields)
    payload = script_json(data)
    return (
        f'<style>{STYLE}</style>'
        f'<div class="attention-explorer" id="{html.escape(element_id)}">'
        f'<div class="explorer-controls"><label>Layer <select class="explorer-layer">{layer_opts}</select></label>'
        f'<label>Head <select class="explorer-head">{head_opts}</select></label>'
        '<span><button class="explorer-view" data-view="baseline">baseline</button> '
        '<button class="explorer-view" data-view="variant">variant</button> '
        '<button class="explorer-view" data-view="difference">difference</button></span>'
        f'<span class="explorer-legend">fields: {legend}</span></div>'
        f'<div class="explorer-words">{words}</div>'
        '<p class="explorer-status">Click a word to see where it attends.</p>'
        '<p class="explorer-key">Shading: darker = more attention from the clicked word (scaled to its largest '
        'value); in the difference view red = more in the variant, blue = less.</p>'
        f'<script type="application/json" class="explorer-data">{payload}</script>'
        f'<script>{SCRIPT}</script></div>'
    )


WIDGETS = {"attention_explorer": attention_explorer}


# one str.translate in C: a join over every character of a 2 x 64 pair's explorer data (680,000 of them) cost 0.2 s
_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                                 "\u2029": "\\u2029"})


def script_json(data) -> str:
    r"""JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&``, U+2028 and U+2029
    written as escapes (the same string to ``JSON.parse``), so no token or field name -- ``</script>``,
    ``<!--<script>`` -- can end the element or switch the HTML tokenizer into a script-escape state.

    >>> print(script_json({"w": "<!--<script>&\u2028"}))
    {"w":"\u003c!--\u003cscript\u003e\u0026\u2028"}
    """
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.translate(_SCRIPT_ESCAPES)
