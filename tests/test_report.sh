#!/usr/bin/env bash
# test_report.sh - `mixprec compare` on a tiny run: the report is valid HTML
# whose charts all have data and whose numbers match the JSON/CSV logs, and it
# renders in headless Chromium without console errors (a screenshot is kept).
. "$(dirname "$0")/lib.sh"

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
            has = (tag == "polyline" and len(a.get("points", "").split()) >= 2) or (tag == "rect" and float(a.get("height", 0)) >= 0)
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
assert set(p.charts) == {"loss", "scale", "layers", "underflow", "histogram", "headroom"}, p.charts
assert all(v > 0 for v in p.charts.values()), p.charts
assert [r["mode"] for r in p.rows] == ["fp32", "fp16", "fp16-dynamic", "bf16"]
for r in p.rows:
    s = json.load(open(f"{d}/{r['mode']}.json"))
    c = r["cells"]
    assert c[2] == f"{100 * s['test_accuracy']:.2f}%", (c[2], s["test_accuracy"])
    assert c[3] == str(len(s["skipped"])) and c[5] == f"{100 * s['underflow_fraction']:.4f}%", c
    rows = list(csv.DictReader(open(f"{d}/{r['mode']}.csv")))
    assert len(rows) == 40 and abs(float(c[1]) - float(rows[-1]["loss"])) < 1e-4, (c[1], rows[-1]["loss"])
    assert all(f"underflow_fc{l}" in rows[0] and f"subnormal_fc{l}" in rows[0] for l in range(2))
# headroom bars: one per run and layer, as tall as the figure in their title (none of height 0 for a value that is not)
import re
sec = html[html.index('id="headroom"'):]
sec = sec[:sec.index("</svg>")]
bars = re.findall(r'<rect class="series"[^>]*height="([0-9.]+)"[^>]*><title>([^<]*): (-?[0-9.]+)</title>', sec)
assert len(bars) == 4 * 2, bars
for h, who, v in bars:
    assert (float(h) > 0) == (abs(float(v)) >= 0.005), (h, who, v)
    mode, layer = who.split(" ")
    s = json.load(open(f"{d}/{mode}.json"))
    t = {x["name"]: x for x in s["tensors"]}[layer]
    assert abs(float(v) - __import__("math").log2(65504 / t["act_amax"])) < 0.006, (who, v, t)
dyn = json.load(open(f"{d}/fp16-dynamic.json"))
assert dyn["final_scale"] == 65536 and dyn["histograms"]["snapshots"], dyn["final_scale"]
assert "fp16 without loss scaling" in html and "fp16-dynamic multiplies the loss" in html
PY
then ok; else fail "report contents"; fi

if command -v chromium > /dev/null; then
    timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr --v=0 \
        --window-size=1100,2600 --screenshot="$T/shot.png" "file://$T/cmp/report.html" > "$T/chromium.txt" 2>&1
    if [ -s "$T/shot.png" ] && [ "$(stat -c %s "$T/shot.png")" -gt 20000 ]; then ok; else fail "no screenshot ($(tail -2 "$T/chromium.txt"))"; fi
    if grep -E 'CONSOLE|Uncaught|SyntaxError' "$T/chromium.txt"; then fail "console errors"; else ok; fi
    mkdir -p "${SCREENSHOT_DIR:-.}" && cp "$T/shot.png" "${SCREENSHOT_DIR:-.}/report-screenshot.png"
else
    fail "chromium is not installed (scripts/deps.sh installs it)"
fi

# skipped steps are listed with where their inf/NaN was
if "$M" compare --precisions fp16-static:1e30 --model mlp:784-32-10 --steps 3 --batch 64 --out "$T/sk" > "$T/sk.txt" 2>&1 &&
   [ "$(grep -c '<tr><td>fp16-static:1e30</td><td>[123]</td><td>1e+30</td><td>[^<]* in fc[01]\.[a-z]* (grad)' "$T/sk/report.html")" -eq 3 ]; then ok
else fail "skipped steps in the report ($(grep -c '<tr><td>fp16-static' "$T/sk/report.html" 2>&1))"; fi

# bad options reach the user, the output directory must be writable
"$M" compare --lr x --out "$T/bad" > "$T/o2.txt" 2>&1; [ $? -eq 2 ] && ok || fail "bad train option: exit 2"
"$M" compare --out /proc/nope --steps 1 > /dev/null 2>&1; [ $? -eq 1 ] && ok || fail "unwritable --out: exit 1"
"$M" compare --precision fp16 > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "--precision refused"
done_
