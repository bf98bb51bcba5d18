#!/usr/bin/env bash
# test_report.sh - `mixprec compare` on a tiny MLP and a tiny GPT run: each
# report is valid HTML whose charts all have data and whose numbers match the
# JSON/CSV logs (check.py below, element by element), and it renders in
# headless Chromium without console errors (screenshots are kept; RENDER=0,
# as in the sanitizer build, leaves the rendering out).
. "$(dirname "$0")/lib.sh"

# check.py DIR CONSOLE [CORPUS]: the report in DIR against DIR's logs and the console output
cat > "$T/check.py" <<'PY'
# The report of a comparison against its logs: every chart element against the CSV/JSON figures it draws.
import csv, json, math, re, sys
from html import unescape as html_unescape
from html.parser import HTMLParser
d, console = sys.argv[1], open(sys.argv[2]).read()
corpus = open(sys.argv[3], "rb").read() if len(sys.argv) > 3 else None
html = open(f"{d}/report.html").read()
summ = json.load(open(f"{d}/summary.json"))
names = [r["precision"] for r in summ["runs"]]
runs = {r["precision"]: r for r in summ["runs"]}
rows = {m: list(csv.DictReader(open(f"{d}/{m}.csv"))) for m in names}
gpt = "val_loss" in summ["runs"][0]
nan = lambda v: math.nan if v is None else v  # JSON writes a value that is not finite as null
final_loss = lambda m: nan(runs[m]["val_loss" if gpt else "test_loss"])
figure = lambda m: nan(runs[m]["val_loss" if gpt else "test_accuracy"])
tensors = lambda m: [k[len("underflow_"):] for k in rows[m][0] if k.startswith("underflow_")]
close = lambda a, b, rel, tol=1e-12: abs(a - b) <= rel * abs(b) + tol

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts, self.cur, self.el, self.intitle, self.color = {}, None, None, False, {}
        self.fill, self.legend_text, self.scale = None, False, {}
        self.abl, self.row, self.intd, self.pre, self.pres = [], None, False, None, {}
        self.tensors, self.tab, self.trow, self.insum, self.inth = {}, None, None, False, False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "").split()
        if tag == "svg" and "chart" in cls:
            self.cur = a["id"]; self.charts[self.cur] = []; self.scale[self.cur] = []
        if self.cur and "series" in cls:
            self.el = {"tag": tag, "a": a, "title": ""}; self.charts[self.cur].append(self.el)
        if self.cur and tag == "rect" and "scale" in cls:
            self.scale[self.cur].append((a["fill"], float(a["data-lo"]), float(a["data-hi"])))
        if self.cur and tag == "rect" and not cls: self.fill = a.get("fill")
        self.legend_text = tag == "text" and "legend" in cls and self.fill is not None
        if tag == "title" and self.el is not None: self.intitle = True
        if tag == "tr" and "data-ablation" in a: self.row = []
        if tag == "td" and self.row is not None: self.intd = True; self.row.append("")
        if tag == "pre" and "sample" in cls: self.pre = a["data-mode"]; self.pres[self.pre] = ""
        if tag == "details" and "tensors" in cls:
            self.tab = {"open": "open" in a, "summary": "", "heads": [], "rows": []}
            self.tensors[a["data-mode"]] = self.tab
        if self.tab is not None:
            self.insum |= tag == "summary"
            if tag == "th": self.inth = True; self.tab["heads"].append("")
            if tag == "tr" and "data-tensor" in a:
                self.trow = {"name": a["data-tensor"], "bad": "bad" in cls, "cells": []}
                self.tab["rows"].append(self.trow)
            if tag == "td" and self.trow is not None: self.trow["cells"].append("")
    def handle_endtag(self, tag):
        if tag == "details": self.tab = None
        if tag == "summary": self.insum = False
        if tag == "th": self.inth = False
        if tag == "tr": self.trow = None
        if tag == "svg": self.cur = None
        if tag == "title": self.intitle = False
        if tag in ("rect", "circle"): self.el = None
        if tag == "td": self.intd = False
        if tag == "tr" and self.row is not None: self.abl.append(self.row); self.row = None
        if tag == "pre": self.pre = None
    def handle_data(self, data):
        if self.intitle: self.el["title"] += data
        if self.legend_text: self.color[data] = self.fill; self.fill = None; self.legend_text = False
        if self.intd: self.row[-1] += data
        if self.pre: self.pres[self.pre] += data
        if self.insum: self.tab["summary"] += data
        if self.inth: self.tab["heads"][-1] += data
        if self.trow is not None and self.trow["cells"]: self.trow["cells"][-1] += data

p = P(); p.feed(html)
assert all(p.charts.values()), {k: len(v) for k, v in p.charts.items()}  # no empty chart
for cid, els in p.charts.items():
    for e in els:
        if e["tag"] == "polyline": assert len(e["a"]["points"].split()) >= 2, (cid, e)
        if e["tag"] == "rect": assert float(e["a"]["width"]) > 0, (cid, e)
lines = lambda cid, m: [e for e in p.charts[cid] if e["tag"] == "polyline" and e["a"]["stroke"] == p.color[m]]
assert len(set(p.color[m] for m in names)) == len(names), p.color  # one colour per run

# training loss and underflow over time: one line per run; where no run's gradient value became zero, a sentence
# says so in place of the two underflow charts (no empty chart)
none = all(float(r[f"underflow_{t}"]) == 0 for m in names for r in rows[m] for t in tensors(m))
assert ("layers" in p.charts) == ("underflow" in p.charts) == (not none), sorted(p.charts)
assert ("No gradient value became zero when stored, in any mode, layer or step." in html) == none
for m in names:
    assert len(lines("loss", m)) == 1 and (none or len(lines("underflow", m)) == 1), m

# per-layer bars: the mean underflow of the CSV, and a bar wherever it is not zero
for e in p.charts.get("layers", []):
    who, v = e["title"].rsplit(": ", 1)
    m, t = who.split(" ")
    mean = sum(float(r[f"underflow_{t}"]) for r in rows[m]) / len(rows[m])
    assert close(float(v.rstrip("%")) / 100, mean, 1e-3, 1e-9), (e["title"], mean)
    assert (float(e["a"]["height"]) > 0) == (mean > 0), (e["title"], e["a"]["height"])

# evaluations: a marker at each --eval-every step (the CSV) and at the end (the JSON), a line when two or more
for m in names:
    want = [(int(r["step"]), float(r["eval_loss"])) for r in rows[m] if r["eval_loss"]]
    want = [w for w in want + [(len(rows[m]), final_loss(m))] if math.isfinite(w[1])]
    got = [e["title"] for e in p.charts["val_loss"] if e["tag"] == "circle" and e["title"].startswith(m + " step ")]
    got = [(int(t.split(" step ")[1].split(":")[0]), float(t.rsplit(": ", 1)[1])) for t in got]
    assert len(got) == len(want), (m, got, want)
    assert all(g[0] == w[0] and close(g[1], w[1], 0, 6e-5) for g, w in zip(got, want)), (m, got, want)
    assert len(lines("val_loss", m)) == (len(want) >= 2), (m, want)

# heat maps: one per run with an underflow, each cell the CSV's figure in the colour of its legend entry
heat = {c[len("heatmap-"):] for c in p.charts if c.startswith("heatmap-")}
assert heat == {m for m in names if any(float(r[f"underflow_{t}"]) > 0 for r in rows[m] for t in tensors(m))}, heat
for m in names:
    if m not in heat:
        assert re.search(r"No gradient value became zero in [^<]*" + re.escape(m), html), m
        continue
    scale = p.scale[f"heatmap-{m}"]
    zero = [f for f, lo, hi in scale if hi == 0]
    assert len(zero) == 1 and len(scale) >= 2, scale
    steps = {t: [] for t in tensors(m)}
    for e in p.charts[f"heatmap-{m}"]:  # "TENSOR, step S: V%" or, binned, "TENSOR, steps A-B: V%"
        who, v = e["title"].rsplit(": ", 1)
        t, span = re.fullmatch(r"(.*), steps? ([0-9-]+)", who).groups()
        a, b = (int(x) for x in (span.split("-") if "-" in span else (span, span)))
        c = sum(float(r[f"underflow_{t}"]) for r in rows[m][a - 1:b]) / (b - a + 1)
        steps[t] += range(a, b + 1)
        assert close(float(v.rstrip("%")) / 100, c, 1e-3), (m, e["title"], c)
        assert float(e["a"]["height"]) > 0, e
        if c == 0: assert e["a"]["fill"] == zero[0], (m, e)
        else: assert any(f == e["a"]["fill"] and lo * (1 - 1e-5) <= c <= hi * (1 + 1e-5) for f, lo, hi in scale), (e, c)
    assert all(sorted(v) == list(range(1, len(rows[m]) + 1)) for v in steps.values()), m  # every step once per tensor

# activation headroom: a bar per run and tensor that stored an activation, as tall as its figure
bars = sum(1 for m in names for x in runs[m]["tensors"] if x["act_amax"])
assert len(p.charts["headroom"]) == bars, (len(p.charts["headroom"]), bars)
for e in p.charts["headroom"]:
    who, v = e["title"].rsplit(": ", 1)
    m, t = who.split(" ")
    amax = {x["name"]: x for x in runs[m]["tensors"]}[t]["act_amax"]
    assert close(float(v), math.log2(65504 / amax), 0, 0.006), (e, amax)
    assert (float(e["a"]["height"]) > 0) == (abs(float(v)) >= 0.005), e

# per tensor: a closed <details> per run, every cell the JSON's figure as the report formats it ("-" where the tensor
# has no such store), the rows with an overflow or a NaN (and only those) highlighted, the summary line naming the
# tensor with the most gradient underflow (the first of equals) and those with an overflow or a NaN
assert sorted(p.tensors) == sorted(names), p.tensors.keys()
pct = lambda v, nd=4: f"{100 * v:.{nd}f}%"
for m in names:
    tab, ts = p.tensors[m], runs[m]["tensors"]
    assert not tab["open"] and tab["heads"].count(f"headroom vs {runs[m]['headroom_against']}") == 2, (m, tab["heads"])
    assert [r["name"] for r in tab["rows"]] == [x["name"] for x in ts], (m, tab["rows"])
    bad = [x["name"] for x in ts if x["overflow"] + x["nan"] + x["act_overflow"] + x["act_nan"] > 0]
    assert [r["name"] for r in tab["rows"] if r["bad"]] == bad, (m, bad)
    for x, r in zip(ts, tab["rows"]):
        want = [x["name"]]
        for pre, kind in (("act_", "act"), ("", "grad")):
            hr = x[f"{kind}_headroom_log2"]
            want += ["-"] * 5 if x[f"{kind}_values"] == 0 else \
                [pct(x[pre + "underflow_fraction"]), pct(x[pre + "subnormal_fraction"]), str(int(x[pre + "overflow"])),
                 str(int(x[pre + "nan"])), "-" if hr is None else f"{hr:.2f}"]
        w = x.get("wgrad_values")
        share = lambda k: x[k] / w if w else 0
        want += ["-", "-"] if w is None else [pct(share("wgrad_lost")), pct(share("wgrad_dead"), 2)]
        assert r["cells"] == want, (m, r["cells"], want)
    under = [x for x in ts if x["underflow_fraction"] > 0]
    worst = max(under, key=lambda x: x["underflow_fraction"]) if under else None
    digest = f"most gradient underflow in {worst['name']} ({100 * worst['underflow_fraction']:.3g}%)" if worst \
        else "no gradient value became zero"
    digest += f"; overflow or NaN in {len(bad)} tensor{'s' * (len(bad) != 1)}: {', '.join(bad[:3])}" + \
        (f" and {len(bad) - 3} more" if len(bad) > 3 else "") if bad else "; no overflow or NaN"
    assert tab["summary"] == f"{m}: {digest}", (tab["summary"], digest)

# what each protection buys: the runs that lack exactly one of fp16-dynamic's protections, by their labels
prot = {"fp16": "loss scaling", "fp16-dynamic+master-weights=none": "fp32 master weights",
        "fp16-dynamic+reductions=half": "fp32 reductions"}
want = [(prot[m], m) for m in names if m in prot] if "fp16-dynamic" in names else []
assert [(a["protection"], a["run"]) for a in summ["ablation"]] == want, summ["ablation"]
assert [(r[0], r[1]) for r in p.abl] == want, p.abl
assert ('id="ablation"' in html) == bool(want) and ("what each protection buys" in console) == bool(want)
fmt = (lambda v: "not finite" if not math.isfinite(v) else f"{v:.4f}") if gpt else (lambda v: f"{100 * v:.2f}%")
reading = html[html.index('<div class="reading">'):html.index("</div>")]
# the speed: what bf16 and fp16 bought in time on this CPU, from the runs' medians, and why
ms = lambda m: runs[m]["ms_per_step"]
said = html_unescape(reading)
if "fp32" in runs and ms("fp32") > 0:
    if "bf16" in runs:
        assert f"a bf16 step took {ms('bf16'):.1f} ms against {ms('fp32'):.1f} ms in fp32 " \
               f"({ms('fp32') / ms('bf16'):.2f}x as fast, medians)" in said, said
        assert ("AMX tiles" in said) or ("vdpbf16ps" in said) or ("no bf16 arithmetic units" in said), said
    h = "fp16-dynamic" if "fp16-dynamic" in runs else "fp16" if "fp16" in runs else None
    if h:
        assert f"{h}: {ms(h):.1f} ms a step against fp32's {ms('fp32'):.1f} ({ms('fp32') / ms(h):.2f}x as fast). " \
               "mixprec widens fp16 to fp32 for the FMA units on every CPU" in said, said
    else:
        assert "widens fp16" not in said, said
for a, r in zip(summ["ablation"], p.abl):
    ref, fig = figure("fp16-dynamic"), figure(a["run"])
    assert r[2] == fmt(fig) and r[4] == str(len(runs[a["run"]]["skipped"])), r
    if not math.isfinite(fig - ref):
        assert (a["eval"] is None) if not math.isfinite(fig) else a["eval"] == fig, (a, fig)
        assert a["delta"] is None and r[3] == "-", (a, r)
    else:
        assert a["eval"] == fig and close(a["delta"], fig - ref, 0, 1e-12), (a, fig, ref)
        assert close(float(r[3].split()[0]) / (1 if gpt else 100), a["delta"], 0, 6e-5), (a, r)
    assert re.search(rf"^{re.escape(a['protection'])} +{re.escape(a['run'])} +{re.escape(fmt(fig))} ", console, re.M), a
    clause = reading[reading.index(f"without {a['protection']} ({a['run']})"):]
    clause = clause[:min(i for i in (clause.find(";"), clause.find("</p>")) if i >= 0)]
    if not math.isfinite(fig - ref): assert "(inf or NaN)" in clause, clause
    elif abs(a["delta"]) < 0.005 * abs(ref): assert "no measurable difference in this run" in clause, clause
    else: assert ("worse" in clause or "better" in clause) and "no measurable" not in clause, clause

# the text samples: the JSON's, HTML-escaped in a <pre> per run, with the judge's figures recomputed from them
if gpt:
    assert sorted(p.pres) == sorted(names), p.pres.keys()
    ws = lambda b: [w for w in re.split(rb"[ \n\t\r]+", b) if w]
    words = set(ws(corpus))
    for m in names:
        s = runs[m]["sample"]
        assert p.pres[m] == "\n" + s, (m, p.pres[m][:60], s[:60])
        assert all(c == "\n" or c == "\t" or " " <= c <= "~" for c in s), s
        b = re.sub(rb"\\x([0-9a-f]{2})", lambda x: bytes([int(x.group(1), 16)]), s.encode())
        assert len(b) == 300, len(b)
        assert close(runs[m]["sample_printable"], sum(32 <= c < 127 or c == 10 for c in b) / len(b), 0, 1e-12), m
        w = ws(b)
        found = runs[m]["sample_words"]
        assert found is None if not w else close(found, sum(x in words for x in w) / len(w), 0, 1e-12), (m, found)
else:
    assert not p.pres and all("sample" not in r for r in summ["runs"])
PY

if "$M" compare --model mlp:784-32-10 --steps 40 --batch 128 --out "$T/cmp" > "$T/out.txt" 2>&1; then ok; else fail "compare exited $? ($(tail -3 "$T/out.txt"))"; fi
grep -q '^fp16-dynamic ' "$T/out.txt" && grep -q 'report: ' "$T/out.txt" && ok || fail "summary table / report path missing"
for f in report.html summary.json fp32.csv fp16.json fp16-dynamic.csv bf16.txt; do
    [ -s "$T/cmp/$f" ] && ok || fail "$f missing"
done

if python3 - "$T/cmp" <<'PY'
import csv, json, sys
from html.parser import HTMLParser
d = sys.argv[1]
html = open(f"{d}/report.html").read()
assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "<script" not in html  # self-contained

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.charts, self.cur, self.rows, self.row, self.cell, self.intd = [], {}, None, [], None, "", False
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in a.get("class", ""):
            self.cur = a["id"]; self.charts[self.cur] = 0
        if self.cur and "series" in a.get("class", "").split():
            has = (tag == "polyline" and len(a.get("points", "").split()) >= 2) or tag == "circle" or \
                  (tag == "rect" and float(a.get("height", 0)) > 0)
            self.charts[self.cur] += bool(has)
        if tag == "tr" and "data-mode" in a:
            self.row = {"mode": a["data-mode"], "cells": []}
        if tag == "td" and self.row is not None:
            self.intd, self.cell = True, ""
    def handle_endtag(self, tag):
        if tag == "svg": self.cur = None
        if tag == "td" and self.row is not None:
            self.row["cells"].append(self.cell.strip()); self.intd = False
        if tag == "tr" and self.row is not None:
            self.rows.append(self.row); self.row = None
    def handle_data(self, data):
        if self.intd: self.cell += data

p = P(); p.feed(html)
assert set(p.charts) == {"loss", "val_loss", "bytes", "scale", "layers", "underflow", "heatmap-fp16", "histogram",
                         "headroom"}, p.charts
assert all(v > 0 for v in p.charts.values()), p.charts
assert p.charts["bytes"] == 4 and "<title>fp32: 16.00 bytes per parameter" in html, p.charts  # weights, gradient, 2 moments
assert [r["mode"] for r in p.rows] == ["fp32", "fp16", "fp16-dynamic", "bf16"]
for r in p.rows:
    s = json.load(open(f"{d}/{r['mode']}.json"))
    c = r["cells"]
    assert c[1] == s["format"] == s["compute_format"], (c[1], s["format"])  # no recipe: the compute format
    assert c[3] == f"{100 * s['test_accuracy']:.2f}%", (c[3], s["test_accuracy"])
    assert c[4] == str(len(s["skipped"])) and c[6] == f"{100 * s['underflow_fraction']:.4f}%", c
    assert c[7:10] == [f"{100 * s['lost_gradients']:.4f}%", f"{100 * s['dead_gradients']:.2f}%",
                       f"{100 * s['lost_updates']:.4f}%"], (c, s["lost_gradients"], s["dead_gradients"], s["lost_updates"])
    assert "recipe" not in s and "quantized" not in s, s.keys()
    rows = list(csv.DictReader(open(f"{d}/{r['mode']}.csv")))
    assert len(rows) == 40 and abs(float(c[2]) - float(rows[-1]["loss"])) < 1e-4, (c[2], rows[-1]["loss"])
    assert all(f"underflow_fc{l}" in rows[0] and f"subnormal_fc{l}" in rows[0] for l in range(2))
dyn = json.load(open(f"{d}/fp16-dynamic.json"))
assert dyn["final_scale"] == 65536 and dyn["histograms"]["snapshots"], dyn["final_scale"]
assert "fp16 without loss scaling" in html and "fp16-dynamic multiplies the loss" in html
PY
then ok; else fail "report contents"; fi
python3 "$T/check.py" "$T/cmp" "$T/out.txt" && ok || fail "MLP report against its logs"

# a GPT on a few KB of text: validation curves, heat maps, the protections' table and a sample per mode
python3 - "$T/tiny.txt" <<'PY'
import random, sys
random.seed(3)
words = ("the a of and to in is was for on that with as by it at from his her they we you not but be this are have "
         "had one all were when there can an said which she or their if will each about how up out them then many "
         "some so these would other into has more two like him time see no could my than first been who its now "
         "people made over did down only way find use may water long little very after words called just where most "
         "know").split()
lines = []
while sum(len(l) + 1 for l in lines) < 6000:
    lines.append(" ".join(random.choice(words) for _ in range(random.randint(4, 12))).capitalize() + ".")
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
modes=fp32,fp16,fp16-dynamic,fp16-dynamic+master-weights=none,fp16-dynamic+reductions=half,fp16-naive
if "$M" compare --model gpt:1-2-32-32 --data "text:$T/tiny.txt" --steps 30 --eval-every 10 --precisions $modes \
       --out "$T/gpt" > "$T/gpt.txt" 2>&1; then ok; else fail "GPT compare exited $? ($(tail -3 "$T/gpt.txt"))"; fi
python3 "$T/check.py" "$T/gpt" "$T/gpt.txt" "$T/tiny.txt" && ok || fail "GPT report against its logs"
# three runs lack one protection each; fp16-naive lacks all three and has no row
g="$T/gpt/report.html"
[ "$(grep -c '<tr data-ablation=' "$g")" -eq 3 ] && ! grep -q 'data-ablation="fp16-naive"' "$g" &&
    grep -q 'id="val_loss"' "$g" && grep -q 'id="heatmap-fp16"' "$g" && ok ||
    fail "GPT report: protections' rows, val_loss or heat map missing"

# fp8/fp4 recipes next to bf16 and fp32: the format column, the saturated and flushed shares per step (one line per
# recipe run, each point the CSV's figure), a table of each recipe run's quantized tensors (the JSON's figures)
if "$M" compare --model gpt:1-2-32-32 --data "text:$T/tiny.txt" --steps 30 --eval-every 10 \
       --precisions fp32,bf16,fp8-delayed,nvfp4 --out "$T/rc" > "$T/rc.txt" 2>&1; then ok
else fail "recipes compare exited $? ($(tail -3 "$T/rc.txt"))"; fi
python3 "$T/check.py" "$T/rc" "$T/rc.txt" "$T/tiny.txt" && ok || fail "recipes report against its logs"
if python3 - "$T/rc" <<'PY'
import csv, json, re, sys
from html.parser import HTMLParser
d = sys.argv[1]
html = open(f"{d}/report.html").read()
runs = {r["precision"]: r for r in json.load(open(f"{d}/summary.json"))["runs"]}
rows = {m: list(csv.DictReader(open(f"{d}/{m}.csv"))) for m in runs}
recipes = ["fp8-delayed", "nvfp4"]
fmt = {"fp32": "fp32", "bf16": "bf16", "fp8-delayed": "bf16 + fp8 e4m3/e5m2", "nvfp4": "bf16 + nvfp4 e2m1"}
assert {m: r["format"] for m, r in runs.items()} == fmt, runs
assert [m for m in runs if "quantized" in runs[m]] == recipes and all(runs[m]["recipe"] == m for m in recipes)

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.chart, self.lines, self.legend, self.text = None, {}, {}, None
        self.summary, self.row, self.quant, self.tab, self.cell = {}, None, {}, None, None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg": self.chart = a.get("id"); self.lines[self.chart] = []; self.legend[self.chart] = []
        if self.chart and tag == "polyline": self.lines[self.chart].append((a["stroke"], a["points"]))
        if self.chart and tag == "text" and a.get("class") == "legend": self.text = ""
        if tag == "tr" and "data-mode" in a: self.row = self.summary.setdefault(a["data-mode"], [])
        if tag == "details" and a.get("class") == "quant": self.tab = self.quant[a["data-mode"]] = {"summary": "", "rows": []}
        if self.tab is not None and tag == "tr" and "data-quant" in a: self.tab["rows"].append([])
        if tag == "td" and (self.row is not None or self.tab is not None): self.cell = ""
        if tag == "summary" and self.tab is not None: self.cell = ""
    def handle_endtag(self, tag):
        if tag == "svg": self.chart = None
        if tag == "text" and self.text is not None: self.legend[self.chart].append(self.text); self.text = None
        if tag == "td" and self.cell is not None:
            (self.row if self.row is not None else self.tab["rows"][-1]).append(self.cell); self.cell = None
        if tag == "summary" and self.tab is not None: self.tab["summary"] = self.cell; self.cell = None
        if tag == "tr": self.row = None
        if tag == "details": self.tab = None
    def handle_data(self, data):
        if self.text is not None: self.text += data
        if self.cell is not None: self.cell += data

p = P(); p.feed(html)
assert {m: c[1] for m, c in p.summary.items()} == fmt, p.summary  # the runs side by side, each with its formats
colors = {m: re.search(r'data-mode="%s"><td><span class="swatch" style="background:([^"]+)"' % re.escape(m), html).group(1)
          for m in runs}
for cid, key in (("quant_saturated", "quant_saturated"), ("quant_flushed", "quant_flushed")):
    assert p.legend[cid] == recipes, (cid, p.legend[cid])
    assert sorted(c for c, _ in p.lines[cid]) == sorted(colors[m] for m in recipes), p.lines[cid]
    vmax = max([1e-4] + [100 * float(r[key]) for m in recipes for r in rows[m]])
    for m in recipes:
        pts = [tuple(map(float, xy.split(","))) for c, pts in p.lines[cid] if c == colors[m] for xy in pts.split()]
        assert len(pts) == len(rows[m]) == 30, (cid, m, len(pts))
        for (x, y), r in zip(pts, rows[m]):  # the plot: x 60 .. 940 over steps 0 .. 30, y 200 .. 30 over 0 .. 1.1 vmax
            assert abs(x - (60 + 880 * int(r["step"]) / 30)) < 0.06, (cid, m, x, r["step"])
            assert abs(y - (200 - 170 * 100 * float(r[key]) / (1.1 * vmax))) < 0.06, (cid, m, y, r[key])
    assert any(100 * float(r[key]) > 1e-3 for m in recipes for r in rows[m]), (cid, "all zero")
assert sorted(p.quant) == recipes, p.quant.keys()
for m in recipes:
    j, tab = runs[m], p.quant[m]
    assert tab["summary"] == f"{m} ({fmt[m]}): {100 * j['quant_saturated_fraction']:.4f}% of the quantized values " \
        f"saturated, {100 * j['quant_flushed_fraction']:.4f}% flushed to zero", tab["summary"]
    want = [[x["name"], f"{x['amax']:.6g}", f"{x['scale']:.6g}", f"{100 * x['saturated_fraction']:.4f}%",
             f"{100 * x['flushed_fraction']:.4f}%", str(int(x["nonfinite"]))] for x in j["quantized"]]
    assert tab["rows"] == want, (m, tab["rows"][:2], want[:2])
    assert len(want) == 12 and all(x["amax"] > 0 and x["scale"] > 0 for x in j["quantized"]), j["quantized"]
# nvfp4 flushes a share of its values to zero (E2M1 holds 0.5 .. 6 per block), fp8-delayed's first step flushes
# (its scales start at 1): the figures are not all zero
assert runs["nvfp4"]["quant_flushed_fraction"] > 0.01 and float(rows["fp8-delayed"][0]["quant_flushed"]) > 0.01
assert "fp8-delayed runs the Linear layers&#39; GEMMs on quantized operands (bf16 + fp8 e4m3/e5m2)" in html
PY
then ok; else fail "recipes in the report"; fi

if [ "${RENDER:-1}" = 0 ]; then
    echo "rendering in Chromium: left to the plain build's run (the pages are the same)"
elif command -v chromium > /dev/null; then
    for r in cmp:report-screenshot gpt:report-gpt-screenshot rc:report-recipes-screenshot; do
        timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr --v=0 \
            --window-size=1100,2600 --screenshot="$T/shot.png" "file://$T/${r%%:*}/report.html" > "$T/chromium.txt" 2>&1
        if [ -s "$T/shot.png" ] && [ "$(stat -c %s "$T/shot.png")" -gt 20000 ]; then ok
        else fail "no screenshot ($(tail -2 "$T/chromium.txt"))"; fi
        if grep -E 'CONSOLE|Uncaught|SyntaxError' "$T/chromium.txt"; then fail "console errors (${r%%:*})"; else ok; fi
        mkdir -p "${SCREENSHOT_DIR:-.}" && cp "$T/shot.png" "${SCREENSHOT_DIR:-.}/${r#*:}.png"
        rm -f "$T/shot.png"
    done
else
    fail "chromium is not installed (scripts/deps.sh installs it)"
fi

# skipped steps are listed with where their inf/NaN was
if "$M" compare --precisions fp16-static:1e30 --model mlp:784-32-10 --steps 3 --batch 64 --out "$T/sk" > "$T/sk.txt" 2>&1 &&
   [ "$(grep -c '<tr><td>fp16-static:1e30</td><td>[123]</td><td>1e+30</td><td>[^<]* in fc[01]\.[a-z]* (grad)' "$T/sk/report.html")" -eq 3 ]; then ok
else fail "skipped steps in the report ($(grep -c '<tr><td>fp16-static' "$T/sk/report.html" 2>&1))"; fi
# without fp16-dynamic there is no reference: no protections' table, nothing in summary.json
python3 "$T/check.py" "$T/sk" "$T/sk.txt" && ok || fail "a comparison without fp16-dynamic"
# its per-tensor table has highlighted rows (check.py: exactly the tensors with an overflow or a NaN)
grep -q '<tr class="bad" data-tensor=' "$T/sk/report.html" && ok || fail "fp16-static:1e30: no highlighted row"

# bad options reach the user, the output directory must be writable
# user input in the page (the output path, in the command line it shows) is escaped, never markup
"$M" compare --precisions fp32 --model mlp:784-32-10 --steps 2 --batch 32 --out "$T/<script>r" > /dev/null 2>&1 &&
    grep -qF -- "--out $T/&lt;script&gt;r" "$T/<script>r/report.html" && ! grep -qF "<script>r" "$T/<script>r/report.html" &&
    ok || fail "the output path is not escaped in the report"
"$M" compare --lr x --out "$T/bad" > "$T/o2.txt" 2>&1; [ $? -eq 2 ] && ok || fail "bad train option: exit 2"
"$M" compare --out /proc/nope --steps 1 > /dev/null 2>&1; [ $? -eq 1 ] && ok || fail "unwritable --out: exit 1"
"$M" compare --precision fp16 > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "--precision refused"
done_
