"""The interactive attention explorer, driven in headless Chromium: what it draws after each action."""

import json
import re

import numpy as np

import routestats as rs
from reports.render import render
from routestats.metrics.routing import word_attention
from routestats.rundir.synthetic import demo_run_dir
from tests.conftest import chromium_dom, console_errors, need

# what a reader does, through the explorer's own controls; a snapshot of every word's shading after each step
DRIVER = """
<script>
window.addEventListener("load", function () {
  var root = document.getElementById("attention-explorer");
  var words = root.querySelectorAll(".explorer-word");
  var layer = root.querySelector("select.explorer-layer"), head = root.querySelector("select.explorer-head");
  var out = [];
  function snap(label) {
    out.push({label: label, view: root.getAttribute("data-view"), layer: layer.value, head: head.value,
              weights: Array.prototype.map.call(words, function (w) { return w.getAttribute("data-weight"); }),
              shaded: Array.prototype.map.call(words, function (w) { return w.style.background; }),
              status: root.querySelector(".explorer-status").textContent});
  }
  function choose(sel, v) { sel.value = v; sel.dispatchEvent(new Event("change")); }
  snap("start");
  words[3].click(); snap("click word 3");
  choose(head, "1"); snap("head 1");
  choose(layer, "0"); snap("layer 0");
  root.querySelector('button[data-view="baseline"]').click(); snap("baseline");
  root.querySelector('button[data-view="difference"]').click(); snap("difference");
  words[5].click(); snap("click word 5");
  var pre = document.createElement("pre"); pre.id = "test-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def test_the_explorer_draws_what_the_reader_asks_for(tmp_path):
    chromium = need("chromium")
    p = rs.load_runs(demo_run_dir()).pairs()[0]
    rep = rs.analyse(demo_run_dir(), resamples=100, permutations=100)
    render(rep, tmp_path / "o", formats=("html",))
    page = (tmp_path / "o" / "report.html").read_text()
    assert page.count('id="attention-explorer"') == 1
    widget = page.split('<div class="attention-explorer"')[1].split("</script></div>")[0]
    assert "http" not in widget and "src=" not in widget  # self-contained: nothing fetched
    driven = tmp_path / "driven.html"
    driven.write_text(page.replace("</body>", DRIVER + "</body>"))
    dom, log = chromium_dom(chromium, driven)
    assert not console_errors(log), console_errors(log)
    snaps = json.loads(re.search(r'<pre id="test-result">(.*?)</pre>', dom, re.S).group(1).replace("&quot;", '"'))
    # the expected rows, from the runs themselves: word-level attention of each head (independent of the report)
    wm = rep.section("words")
    ex_id = int(re.search(r"example (\d+)", wm.title).group(1))
    row = p.baseline.examples().set_index("example_id").loc[ex_id]
    word_ids = np.asarray(row["word_ids"])

    def words_of(run, layer, head, query):
        (blk,) = list(run.iter_attention(examples=[ex_id]))
        sel = np.flatnonzero(blk.layer == layer)
        mats = [word_attention(blk.weights[r].astype(np.float64), word_ids)[0] for r in sel]
        m = np.mean(mats, axis=0) if head == "mean" else mats[int(head)]
        return m[query]

    last = str(int(rep.facts["n_layers"]) - 1)
    assert snaps[0]["weights"] == [None] * len(snaps[0]["weights"]) and "Click a word" in snaps[0]["status"]
    want = {
        "click word 3": words_of(p.variant, int(last), "mean", 3),
        "head 1": words_of(p.variant, int(last), 1, 3),
        "layer 0": words_of(p.variant, 0, 1, 3),
        "baseline": words_of(p.baseline, 0, 1, 3),
        "difference": words_of(p.variant, 0, 1, 3) - words_of(p.baseline, 0, 1, 3),
        "click word 5": words_of(p.variant, 0, 1, 5) - words_of(p.baseline, 0, 1, 5),
    }
    views = {"click word 3": "variant", "head 1": "variant", "layer 0": "variant", "baseline": "baseline",
             "difference": "difference", "click word 5": "difference"}
    for s in snaps[1:]:
        got = np.array([float(w) for w in s["weights"]])
        np.testing.assert_allclose(got, want[s["label"]], atol=2e-6, err_msg=s["label"])  # 6 decimals in the page
        assert s["view"] == views[s["label"]]
        best = int(np.argmax(np.abs(got)))
        assert s["shaded"][best].startswith("rgb(")  # the largest |weight| at full opacity (rgba(..., 1) reads rgb)
        assert s["status"].startswith(f"Layer {s['layer']}, ")
    assert snaps[1]["layer"] == last and snaps[1]["head"] == "mean" and snaps[3]["layer"] == "0"
    # difference shading: red for more attention in the variant, blue for less
    d = [s for s in snaps if s["label"] == "difference"][0]
    signs = np.sign(want["difference"])
    for shade, sg in zip(d["shaded"], signs):
        if sg > 0:
            assert re.match(r"rgba?\(178, 24, 43", shade), shade
        elif sg < 0:
            assert re.match(r"rgba?\(33, 102, 172", shade), shade
