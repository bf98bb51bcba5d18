#!/usr/bin/env bash
# test_cli.sh - the mixprec command: values, JSON and exit statuses.
. "$(dirname "$0")/lib.sh"

expect 0 "$M" --version && has "$out" '^mixprec 0\.1\.0'
expect 0 "$M" --help && has "$out" 'formats' && has "$out" 'cast' && has "$out" 'scaler-sim'
expect 2 "$M" && has "$err" 'usage' && [ -z "$out" ] && ok
# every write to standard output is checked: a closed or full one is exit 1 with a message, a reader gone is quiet
for c in formats tour "modes --markdown"; do
    $M $c >&- 2>"$T/e"; rc=$?
    if [ "$rc" -eq 1 ] && grep -q "standard output: Bad file descriptor" "$T/e"; then ok; else fail "$c >&-: exit $rc, $(cat "$T/e")"; fi
    $M $c >/dev/full 2>"$T/e"; rc=$?
    if [ "$rc" -eq 1 ] && grep -q "standard output: No space left on device" "$T/e"; then ok; else fail "$c >/dev/full: exit $rc, $(cat "$T/e")"; fi
done
"$M" formats --json 2>"$T/e" | head -c 10 >/dev/null
if [ ! -s "$T/e" ]; then ok; else fail "a reader that went away is not quiet: $(cat "$T/e")"; fi
expect 2 "$M" frobnicate && one_line && has "$err" "unknown command 'frobnicate'"
# a value a user gave is echoed on one line, its control characters escaped
expect 2 "$M" train --lr $'1\n2' && one_line && has "$err" "not '1\\\\x0a2'"
expect 2 "$M" train --model $'gpt:\e[31m' && one_line && has "$err" "gpt:\\\\x1b\\[31m"
expect 0 "$M" cast --help && has "$out" 'usage: mixprec cast'
# a long value is cut in its middle, never the reason: a 1,000-layer MLP, a 3,000-byte number, a 3,000-byte path
long=$(printf -- '-8%.0s' $(seq 1000))
expect 2 "$M" train --model "mlp:784$long-10" && one_line &&
    has "$err" "^mixprec train: model 'mlp:784-8-8-[-8]*\[\.\.\. [0-9]+ bytes \.\.\.\][-8]*-8-10': at most 16 layers \(see"
expect 2 "$M" cast "$(printf '1%.0s' $(seq 3000))x" && one_line &&
    has "$err" "^mixprec cast: '1+\[\.\.\. 2939 bytes \.\.\.\]1+x' is not a number"
expect 1 "$M" train --model mlp:784-10 --data "$T/$(printf 'p%.0s' $(seq 3000))" --steps 1 && one_line &&
    has "$err" "p\[\.\.\. [0-9]+ bytes \.\.\.\]p+: cannot open"

# modes: the table, its help lines in train --help, and docs/TRAINING.md's copy of it
expect 0 "$M" modes && has "$out" '^fp16-dynamic +fp16 +fp32 masters, fp16 copies +fp32 +fp32 +dynamic ' &&
    has "$out" '^nvfp4 +bf16 \+ nvfp4 e2m1 '
expect 0 "$M" train --help && has "$out" '^ +bf16-pure +bf16 weights only, updates rounded stochastically$'
expect 2 "$M" modes --json && one_line
expect 0 "$M" modes --markdown
docs=$(dirname "$0")/../docs/TRAINING.md
if [ "$(grep -A40 '^<!-- the table of `mixprec modes --markdown`' "$docs" | sed -n '2,/^$/p' | sed '/^$/d')" = "$out" ]; then ok
else fail "docs/TRAINING.md's table of modes is not mixprec modes --markdown's"; fi

# cast: bits, values and status words
expect 0 "$M" cast 1e-8 65520 65504 1e-5 -0 nan
has "$out" '^1e-8 .* 0x0000 +0 .*underflow$'
has "$out" '^65520 .* 0x7c00 +inf .*overflow$'
has "$out" '^65504 .* 0x7bff +65504 .*exact$'
has "$out" '^1e-5 .* 0x00a8 +1.00135803e-05 .*subnormal$'
has "$out" '^-0 .* 0x8000 '
has "$out" '^nan .* 0x7e00 .*nan$'
expect 0 "$M" cast --to bf16 1e-8 && has "$out" '^1e-8 .* 0x322c .*rounded$'
expect 0 "$M" cast --to e4m3 464 465 && has "$out" '^464 .* 0x7e +448 ' && has "$out" '^465 .* 0x7f +nan .*overflow$'
expect 0 "$M" cast --to e4m3 --saturate 1000 -inf && has "$out" '^1000 .* 0x7e +448 .*saturated$' && has "$out" '^-inf .* 0xfe +-448 .*saturated$'
expect 0 "$M" cast --to e5m2 61440 && has "$out" '0x7c +inf .*overflow$'
expect 0 "$M" cast 0x1p-24 && has "$out" '0x0001 +5.96046448e-08 +0 +subnormal$'
# the MX formats: fp4 (e2m1, saturating; NaN becomes a zero of the other sign, as ml_dtypes) and e8m0 scales
expect 0 "$M" cast --to e2m1 5 7 6.5 0.25 0.3 nan -nan -0.1 -inf
has "$out" '^5 .* 0x06 +4 .*rounded$' && has "$out" '^7 .* 0x07 +6 .*saturated$' && has "$out" '^6.5 .* 0x07 +6 .*rounded$'
has "$out" '^0.25 .* 0x00 +0 .*underflow$' && has "$out" '^0.3 .* 0x01 +0.5 .*subnormal$'
has "$out" '^nan .* 0x08 +-0 .*nan$' && has "$out" '^-nan .* 0x00 +0 .*nan$' && has "$out" '^-0.1 .* 0x08 +-0 .*underflow$'
has "$out" '^-inf .* 0x0f +-6 .*saturated$'
expect 0 "$M" cast --to fp4 1.75 && has "$out" '^1.75 .* 0x04 +2 .*rounded$'
expect 0 "$M" cast --to e8m0 0.75 1 0 -1 3.4e38 0x1p-149 nan
has "$out" '^0.75 .* 0x7f +1 .*rounded$' && has "$out" '^1 .* 0x7f +1 .*exact$' && has "$out" '^0 .* 0xff +nan .*invalid$'
has "$out" '^-1 .* 0xff +nan .*invalid$' && has "$out" '^3.4e38 .* 0xff +nan .*overflow$'
has "$out" '^0x1p-149 .* 0x00 +5.87747175e-39 .*rounded$' && has "$out" '^nan .* 0xff +nan .*nan$'
expect 2 "$M" cast --to e2m1 --saturate 1 && one_line && has "$err" 'e2m1 always saturates'
expect 2 "$M" underflow --format e2m1 && one_line && has "$err" "not 'e2m1'"
expect 2 "$M" underflow --format e8m0 && one_line && has "$err" "not 'e8m0'"

expect 2 "$M" cast abc && one_line && has "$err" "'abc' is not a number"
expect 2 "$M" cast 1e39 && one_line
expect 2 "$M" cast --to fp12 1 && one_line && has "$err" "unknown format 'fp12'" && has "$err" 'e8m0 or e2m1'
expect 2 "$M" cast --to && one_line
expect 2 "$M" cast && one_line
expect 2 "$M" cast --saturate 1 && one_line

# formats: the table and the JSON agree with numpy.finfo's numbers
expect 0 "$M" formats
has "$out" '^fp16 +2 +5 +10 +65504 +6.10352e-05 +5.96046e-08 +0.000976562'
has "$out" '^1e-08 +0  GONE'
has "$out" '^e8m0 +1 +8 +0 +1.70141e\+38 +5.87747e-39 +5.87747e-39 +1 +\(no inf, zero or sign'
has "$out" '^e2m1 +1 +2 +1 +6 +1 +0.5 +0.5 +\(no inf or NaN'
expect 0 "$M" formats --json
if command -v python3 >/dev/null; then
    if printf '%s' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
f = {x["name"]: x for x in d["formats"]}
assert f["fp16"]["max"] == 65504 and f["fp16"]["min_subnormal"] == 2**-24 and f["fp16"]["eps"] == 2**-10
assert f["bf16"]["min_subnormal"] == 2**-133 and f["e4m3"]["max"] == 448 and not f["e4m3"]["has_inf"]
assert f["e5m2"]["max"] == 57344 and f["fp32"]["eps"] == 2**-23
assert list(f) == ["fp32", "fp16", "bf16", "e4m3", "e5m2", "e8m0", "e2m1"]
e8, e2 = f["e8m0"], f["e2m1"]
assert (e8["max"], e8["min_normal"], e8["min_subnormal"], e8["eps"], e8["bias"], e8["mantissa_bits"]) == (2**127, 2**-127, 2**-127, 1, 127, 0)
assert (e2["max"], e2["min_normal"], e2["min_subnormal"], e2["eps"], e2["bias"], e2["bytes"]) == (6, 1, 0.5, 0.5, 1, 1)
assert not e8["has_inf"] and not e2["has_inf"]
s = {round(-__import__("math").log10(v["value"])): v for v in d["small_values"]}
assert s[8]["fp16"]["status"] == "underflow" and s[8]["fp16"]["value"] == 0
assert s[7]["fp16"]["status"] == "subnormal" and s[7]["fp16"]["value"] == 2 * 2**-24
assert s[8]["bf16"]["status"] == "rounded" and abs(s[8]["bf16"]["value"] - 1e-8) < 1e-10
'; then ok; else fail "formats --json values"; fi
else
    fail "python3 is needed to check JSON"
fi
expect 2 "$M" formats --yaml && one_line

# bench runs and reports every op
expect 0 "$M" bench convert --n 1000 --reps 3 --json && has "$out" '"op": "f32->bf16\+stats"' && has "$out" '"op": "copy"'
expect 2 "$M" bench convert --n 0 && one_line
expect 0 "$M" bench unscale --n 4096 --reps 3 --json && has "$out" '"op": "unscale fp16"'
expect 0 "$M" bench gemm --max 256 --reps 1 --json && has "$out" '"shape": "square 256", "m": 256' && has "$out" '"type": "bf16"'
expect 0 "$M" bench peak --json && has "$out" '"fma_gflops": '
expect 2 "$M" bench gemm --max x && one_line
expect 2 "$M" bench nothing && one_line

# scaler-sim: the scale column follows GradScaler's rule on the found_inf column,
# and the counts agree with the rows
expect 0 "$M" scaler-sim --steps 600 --n 2048 --growth-interval 50 --json
if printf '%s' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows, summ, cfg = d["steps"], d["summary"], d["config"]
assert len(rows) == 600 and cfg["growth_interval"] == 50
scale, tracker = cfg["init_scale"], 0
for r in rows:
    assert r["scale"] == scale, (r["step"], r["scale"], scale)
    assert r["found_inf"] == (r["overflow"] > 0)
    assert 0 <= r["underflow"] <= 1 and 0 <= r["subnormal"] <= 1
    if r["found_inf"]:
        scale, tracker = scale * 0.5, 0
    else:
        tracker += 1
        if tracker == 50:
            scale, tracker = scale * 2, 0
assert summ["final_scale"] == scale
assert summ["skipped"] == sum(r["found_inf"] for r in rows) > 0
assert summ["growths"] > 0 and summ["mean_underflow_unscaled"] > summ["mean_underflow"]
'; then ok; else fail "scaler-sim --json replay"; fi
expect 0 "$M" scaler-sim --steps 100 --n 512 --csv
has "$out" '^step,scale,found_inf,spike,underflow,subnormal,overflow,underflow_unscaled$'
if [ "$(printf '%s\n' "$out" | wc -l)" -eq 101 ]; then ok; else fail "csv rows"; fi
expect 0 "$M" scaler-sim --steps 300 --n 1024
has "$out" '^steps 300, skipped [0-9]+, growths'
has "$out" 'with loss scaling'
# a floor with overflow that never stops: reported, exit 1
expect 1 "$M" scaler-sim --steps 200 --n 256 --start 1e3 --end 1e3 --min-scale 1 --init-scale 4
has "$out" 'stopped: loss scale already at minimum'
expect 2 "$M" scaler-sim --growth-factor 0.5 && one_line && has "$err" 'growth_factor'
expect 2 "$M" scaler-sim --steps x && one_line
expect 2 "$M" scaler-sim --json --csv && one_line

# train: a short run learns, logs every step, and its checkpoint resumes bit-identically
plain_fashion_mnist
TR=(train --model mlp:784-48-10 --batch 64 --threads 2 --data "$T/fmnist")
# a write that fails mid-run names its error as the short commands do
"$M" "${TR[@]}" --steps 2 >/dev/full 2>"$T/e"; rc=$?
if [ "$rc" -eq 1 ] && grep -q "^mixprec train: standard output: No space left on device$" "$T/e"; then ok
else fail "train >/dev/full: exit $rc, $(cat "$T/e")"; fi
expect 0 "$M" "${TR[@]}" --precision fp16-dynamic --steps 30 --log "$T/log.csv" --save "$T/a.st"
has "$out" '^result: test accuracy [0-9.]+%'
if [ "$(wc -l < "$T/log.csv")" -eq 31 ] && head -1 "$T/log.csv" | grep -q '^step,loss,scale,skipped,grad_norm,lr,underflow,overflow,act_overflow,lost_gradients,dead_gradients,lost_updates,ms,eval_loss,underflow_fc0,underflow_fc1,subnormal_fc0,subnormal_fc1,act_overflow_fc0,act_overflow_fc1,act_underflow_fc0,act_underflow_fc1,act_subnormal_fc0,act_subnormal_fc1,overflow_fc0,overflow_fc1,nan_fc0,nan_fc1,headroom_fc0,headroom_fc1,grad_headroom_fc0,grad_headroom_fc1,lost_fc0,lost_fc1,dead_fc0,dead_fc1$'; then ok; else fail "log rows"; fi
if python3 - "$T/log.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
first = sum(float(r["loss"]) for r in rows[:5]) / 5
last = sum(float(r["loss"]) for r in rows[-5:]) / 5
assert last < 0.7 * first, (first, last)
assert float(rows[0]["scale"]) == 65536.0
PY
then ok; else fail "loss did not fall"; fi
expect 0 "$M" "${TR[@]}" --precision fp16-dynamic --steps 17 --save "$T/b.st"
expect 0 "$M" "${TR[@]}" --precision fp16-dynamic --steps 30 --resume "$T/b.st" --save "$T/c.st"
has "$out" 'resumed'
if cmp -s "$T/a.st" "$T/c.st"; then ok; else fail "resume differs from an uninterrupted run"; fi
expect 1 "$M" "${TR[@]}" --precision fp16-dynamic --steps 17 --resume "$T/b.st" && one_line && has "$err" 'at step 17 already'
# every step overflows at scale 1e30: all skipped, weights exactly the initial ones
expect 0 "$M" "${TR[@]}" --precision fp16-static:1e30 --steps 4 --save "$T/s.st" --summary "$T/s.json"
has "$out" '4 steps, 4 skipped'
has "$out" '^  step 4 skipped, scale 1e\+30 -> 1e\+30: (inf|NaN) in fc[01]\.(weight|bias) \(grad\) and 3 more$'
if python3 - "$T/s.json" <<'PY'
import json, sys
sk = json.load(open(sys.argv[1]))["skipped"]
assert [e["step"] for e in sk] == [1, 2, 3, 4] and all(abs(e["scale"] / 1e30 - 1) < 1e-6 for e in sk), sk
assert all(sorted(e["tensors"]) == ["fc0.bias", "fc0.weight", "fc1.bias", "fc1.weight"] for e in sk), sk
assert all(e["first_activation"] is None for e in sk), sk
PY
then ok; else fail "skipped steps in the summary"; fi
expect 0 "$M" "${TR[@]}" --precision fp16-static:1e30 --steps 1 --save "$T/s1.st"
if python3 - "$T/s.st" "$T/s1.st" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a["fc0.weight"] == b["fc0.weight"] and a["fc1.bias"] == b["fc1.bias"]
PY
then ok; else fail "skipped steps changed the weights"; fi
# scale_tensor SRC DST NAME FACTOR: a copy of safetensors file SRC with fp32 tensor NAME multiplied
scale_tensor() {
    python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name, factor = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
data = bytearray(b[8 + n:])
lo, hi = h[name]["data_offsets"]
w = struct.unpack(f"<{(hi - lo) // 4}f", data[lo:hi])
data[lo:hi] = struct.pack(f"<{len(w)}f", *[x * factor for x in w])
open(dst, "wb").write(b[:8 + n] + bytes(data))
PY
}
# activation stores are counted: fc0's weights x 1e6 overflow its output in fp16,
# and the skipped step names fc0 as the first overflowing activation
scale_tensor "$T/a.st" "$T/abig.st" fc0.weight 1e6
expect 0 "$M" "${TR[@]}" --precision fp16-dynamic --steps 1 --init "$T/abig.st" --log "$T/abig.csv"
has "$out" '^  step 1 skipped, scale 65536 -> 32768: .*; first overflowing activation fc0$'
if python3 - "$T/abig.csv" <<'PY'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert int(r["act_overflow_fc0"]) > 0 and int(r["act_overflow"]) >= int(r["act_overflow_fc0"]), r
assert float(r["headroom_fc0"]) < 1, r  # fc0's finite stores reached fp16's top octave
PY
then ok; else fail "MLP activation overflow counted"; fi
# weights saved in bf16 load back (as --init) and are half the size
expect 0 "$M" "${TR[@]}" --steps 2 --save "$T/h.st" --save-dtype bf16
if python3 - "$T/h.st" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["fc0.weight"]["dtype"] == "BF16" and h["fc0.weight"]["shape"] == [48, 784]
assert h["optim.fc0.weight.state1"]["dtype"] == "F32"
PY
then ok; else fail "--save-dtype bf16"; fi
expect 0 "$M" "${TR[@]}" --steps 1 --init "$T/h.st"
expect 2 "$M" train --save-dtype e4m3 && one_line
# bad input: one line, non-zero
printf 'garbage' > "$T/bad.st"
expect 1 "$M" "${TR[@]}" --steps 2 --resume "$T/bad.st" && one_line && has "$err" 'bad.st'
head -c 1000 "$T/a.st" > "$T/trunc.st"
expect 1 "$M" "${TR[@]}" --precision fp16-dynamic --steps 2 --resume "$T/trunc.st" && one_line
expect 1 "$M" "${TR[@]}" --precision bf16 --steps 2 --resume "$T/a.st" && one_line && has "$err" "precision 'fp16-dynamic'"
expect 2 "$M" train --model mlp:100-10 --steps 1 && one_line && has "$err" 'input width must be 784'
expect 1 "$M" train --data "$T" --steps 1 && one_line && has "$err" 'train-images'
expect 2 "$M" train --precision fp12 && one_line
expect 2 "$M" train --epochs 1 --steps 2 && one_line
expect 2 "$M" train --lr x && one_line
expect 1 "$M" "${TR[@]}" --steps 1 --save "$T/no/such/dir/x.st" && one_line && has "$err" 'x.st'
# what the precision lost: in fp32 no weight-gradient value is lost and the dead ones are
# the exact zeros of the weight gradients (one step of one micro-batch: recounted from
# --dump-grads); at lr 1e-6 fp16 weights without masters lose most updates, fp32 masters
# almost none; --frozen-every is gone
expect 0 "$M" "${TR[@]}" --steps 1 --log "$T/pl.csv" --summary "$T/pl.json" --dump-grads "$T/pl.grads"
expect 0 "$M" "${TR[@]}" --precision fp16 --master-weights none --lr 1e-6 --steps 3 --log "$T/pn.csv" --summary "$T/pn.json"
expect 0 "$M" "${TR[@]}" --precision fp16 --lr 1e-6 --steps 3 --summary "$T/pm.json"
if python3 - "$T/pl.csv" "$T/pl.json" "$T/pl.grads" "$T/pn.csv" "$T/pn.json" "$T/pm.json" <<'PY'
import csv, json, struct, sys
row = list(csv.DictReader(open(sys.argv[1])))[0]
s = json.load(open(sys.argv[2]))
b = open(sys.argv[3], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
zeros, total = {}, 0
for name, t in h.items():
    if name.endswith(".weight.grad"):
        lo, hi = t["data_offsets"]
        g = struct.unpack(f"<{(hi - lo) // 4}f", b[8 + n + lo:8 + n + hi])
        zeros[name.split(".")[0]] = sum(x == 0 for x in g)
        total += len(g)
t = {x["name"]: x for x in s["tensors"]}
assert sorted(zeros) == ["fc0", "fc1"] and sum(zeros.values()) > 0, zeros
for l in ("fc0", "fc1"):
    assert t[l]["wgrad_dead"] == zeros[l] and t[l]["wgrad_lost"] == 0, (l, t[l], zeros)
    assert float(row["lost_" + l]) == 0 and abs(float(row["dead_" + l]) * t[l]["wgrad_values"] - zeros[l]) < 0.5, (row, zeros)
assert s["lost_gradients"] == 0 and abs(s["dead_gradients"] * total - sum(zeros.values())) < 1e-6 * total, s
assert float(row["lost_gradients"]) == 0 and abs(float(row["dead_gradients"]) - s["dead_gradients"]) < 1e-5, row
assert 0 <= s["lost_updates"] < 0.01 and float(row["lost_updates"]) == s["lost_updates"], s["lost_updates"]
none, masters = json.load(open(sys.argv[5])), json.load(open(sys.argv[6]))
rows = list(csv.DictReader(open(sys.argv[4])))
assert none["lost_updates"] > 0.5 and masters["lost_updates"] < 0.01, (none["lost_updates"], masters["lost_updates"])
assert all(0.5 < float(r["lost_updates"]) <= 1 for r in rows), [r["lost_updates"] for r in rows]
assert abs(sum(float(r["lost_updates"]) for r in rows) / 3 - none["lost_updates"]) < 1e-5
PY
then ok; else fail "lost and dead weight gradients, lost updates"; fi
expect 2 "$M" "${TR[@]}" --steps 1 --frozen-every 5 && one_line && has "$err" 'lost_updates' && has "$err" 'dead_gradients'

# train --model gpt: text data, validation loss, resume, sample, compare's checkpoints
for i in $(seq 1 40); do echo "The cat sat on the mat, and the dog sat on the log number $i."; done > "$T/c.txt"
GT=(train --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --threads 2 --lr 3e-3)
expect 0 "$M" "${GT[@]}" --precision bf16 --steps 12 --log "$T/g.csv" --save "$T/g.st"
has "$out" '^result: validation loss [0-9.]+ \([0-9.]+ bits per byte\)'
if [ "$(wc -l < "$T/g.csv")" -eq 13 ] && head -1 "$T/g.csv" | grep -q 'underflow_h.0.attn.c_attn'; then ok; else fail "gpt log"; fi
# activation headroom: one value per activation and step, none for weight entries;
# attention row 0 holds exactly 1, a layer norm (weight 1, bias 0) at most sqrt(C - 1)
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic --steps 1 --log "$T/gh.csv" --summary "$T/gh.json" --dump-grads "$T/gh.grads"
if python3 - "$T/gh.csv" "$T/gh.json" "$T/gh.grads" <<'PY'
import csv, json, math, struct, sys
rows = list(csv.DictReader(open(sys.argv[1])))
s = json.load(open(sys.argv[2]))
b = open(sys.argv[3], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
def amax(name):
    lo, hi = h[name]["data_offsets"]
    return max(abs(x) for x in struct.unpack(f"<{(hi - lo) // 4}f", b[8 + n + lo:8 + n + hi]))
t = {x["name"]: x for x in s["tensors"]}
assert s["headroom_against"] == "fp16"
assert t["h.0.attn.att"]["act_amax"] == 1 and abs(t["h.0.attn.att"]["act_headroom_log2"] - math.log2(65504)) < 1e-9
assert 0.5 < t["h.0.ln_1"]["act_amax"] <= math.sqrt(15) * 1.001, t["h.0.ln_1"]
assert t["h.0.attn.c_attn.weight"]["act_amax"] is None and t["h.0.attn.c_attn.weight"]["act_headroom_log2"] is None
# a weight's gradient amax is the loss scale times the unscaled gradient's, recounted from the dump
assert rows[0]["skipped"] == "0" and float(rows[0]["scale"]) == 65536
for w in ("h.0.attn.c_attn.weight", "h.0.mlp.c_proj.weight", "wte.weight"):
    assert t[w]["grad_amax"] == 65536 * amax(f"transformer.{w}.grad"), (w, t[w]["grad_amax"], amax(f"transformer.{w}.grad"))
assert t["wpe.weight"]["grad_amax"] is None and t["h.0.mlp.gelu"]["grad_headroom_log2"] > 0
for r in rows:
    assert r["headroom_h.0.attn.c_attn.weight"] == "" and float(r["headroom_lm_head"]) > 0, r
    assert all(0 < float(r["headroom_" + n]) < 30 for n in t if not n.endswith(".weight")), r
    assert r["grad_headroom_wpe.weight"] == "" and float(r["grad_headroom_h.0.res_1"]) > 0, r
PY
then ok; else fail "activation headroom"; fi
expect 0 "$M" "${GT[@]}" --precision bf16 --steps 5 --save "$T/g5.st"
expect 0 "$M" "${GT[@]}" --precision bf16 --steps 12 --resume "$T/g5.st" --save "$T/g12.st"
if cmp -s "$T/g.st" "$T/g12.st"; then ok; else fail "gpt resume differs from an uninterrupted run"; fi
expect 0 "$M" sample --from "$T/g.st" --prompt "The " --tokens 50 --judge --data "text:$T/c.txt"
has "$out" '^The ' && has "$err" '^judged: [0-9.]+% of 50 bytes printable ASCII or newline; [0-9.]+% of [0-9]+ words found in the corpus \([0-9]+ bytes\)$'
expect 2 "$M" sample --from "$T/g.st" --data "text:$T/c.txt" && one_line && has "$err" 'for --judge'
expect 1 "$M" sample --from "$T/g.st" --judge --data "text:$T/nope" && one_line && has "$err" 'nope: cannot open'
expect 1 "$M" sample --from "$T/bad.st" && one_line
expect 2 "$M" sample && one_line
expect 0 "$M" compare --precisions fp32,bf16 --checkpoints --out "$T/cmp" --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --steps 3
if [ -s "$T/cmp/fp32.ckpt" ] && [ -s "$T/cmp/bf16.ckpt" ] && [ -s "$T/cmp/summary.json" ]; then ok; else fail "compare --checkpoints"; fi
# precision per layer: a checkpoint resumes only under its assignment (the same from a file); file errors name FILE:LINE
expect 0 "$M" "${GT[@]}" --precision 'nvfp4+bf16=transformer.h.0.mlp.*' --steps 3 --save "$T/l3.st"
expect 1 "$M" "${GT[@]}" --precision nvfp4 --steps 5 --resume "$T/l3.st" && one_line &&
    has "$err" "checkpoint has layers '\\+bf16=transformer.h.0.mlp.\\*', this run asks for 'none'"
printf '# the MLP in bf16\ntransformer.h.0.mlp.* = bf16 # both\n' > "$T/keep.layers"
expect 0 "$M" "${GT[@]}" --precision nvfp4 --layer-precision "$T/keep.layers" --steps 5 --resume "$T/l3.st" &&
    has "$out" 'nvfp4\+layers=keep'
printf 'lm_head = bf16\nlm_head nvfp4\n' > "$T/bad.layers"
expect 2 "$M" "${GT[@]}" --precision nvfp4 --layer-precision "$T/bad.layers" --steps 1 && one_line &&
    has "$err" "bad.layers:2: 'lm_head nvfp4' is not 'pattern = recipe'"
expect 2 "$M" "${GT[@]}" --precision 'bf16+nvfp4=transformer.h.1.*' --steps 1 && one_line && has "$err" 'matches no layer'
expect 2 "$M" compare --precisions 'bf16,bf16+nvfp4=transformer.h.1.*' --out "$T/cmpx" --model gpt:1-2-16-16 --data "text:$T/c.txt" --steps 1 &&
    one_line && has "$err" 'matches no layer'
if [ ! -e "$T/cmpx" ]; then ok; else fail "compare ran modes before refusing a pattern that matches no layer"; fi
expect 0 "$M" compare --precisions 'bf16,nvfp4+bf16=transformer.h.0.mlp.*' --out "$T/cmpl" --model gpt:1-2-16-16 \
    --data "text:$T/c.txt" --batch 4 --steps 3
if python3 - "$T/cmpl/nvfp4+bf16=transformer.h.0.mlp.*.json" "$T/cmpl/report.html" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
want = {"transformer.h.0.attn.c_attn": "nvfp4", "transformer.h.0.attn.c_proj": "nvfp4",
        "transformer.h.0.mlp.c_fc": "bf16", "transformer.h.0.mlp.c_proj": "bf16", "lm_head": "bf16"}
assert {x["name"]: x["recipe"] for x in s["layer_recipes"]} == want, s["layer_recipes"]
assert sorted({q["name"].rsplit(".", 1)[0] for q in s["quantized"]}) == ["h.0.attn.c_attn", "h.0.attn.c_proj"], s["quantized"]
assert all(q["recipe"] == "nvfp4" and q["values"] > 0 for q in s["quantized"])
html = open(sys.argv[2]).read()
assert '<tr data-layer="transformer.h.0.mlp.c_fc"><td>transformer.h.0.mlp.c_fc</td><td>bf16</td>' in html
assert '<tr data-layer="transformer.h.0.attn.c_attn"><td>transformer.h.0.attn.c_attn</td><td>nvfp4</td>' in html
PY
then ok; else fail "compare with a per-layer mode: summary and report"; fi
# the recipe probe: the training's bits unchanged, every bf16 Linear layer measured in each direction, a layer
# in its own recipe not; the modes and models it cannot measure refused
expect 0 "$M" "${GT[@]}" --precision bf16 --steps 4 --log "$T/np.csv"
expect 0 "$M" "${GT[@]}" --precision 'bf16+mxfp8=transformer.h.0.mlp.c_fc' --probe nvfp4 --steps 4 --log "$T/pr0.csv" \
    --summary "$T/pr0.json" && has "$out" '^ +transformer.h.0.mlp.c_fc +- \(in its own recipe\)$' &&
    has "$out" '^ +transformer.h.0.attn.c_attn +0\.[0-9]+ / 0\.[0-9]+ / 0\.[0-9]+$'
expect 0 "$M" "${GT[@]}" --precision bf16 --probe nvfp4 --steps 4 --log "$T/pr.csv" --summary "$T/pr.json"
expect 0 "$M" "${GT[@]}" --precision bf16 --probe fp8-current --steps 4 --summary "$T/pr8.json"
if cmp -s <(cut -d, -f1-12 "$T/np.csv") <(cut -d, -f1-12 "$T/pr.csv") &&
   python3 - "$T/pr.json" "$T/pr8.json" "$T/pr0.json" <<'PY'
import json, math, sys
nv, f8, mixed = (json.load(open(f))["probe"] for f in sys.argv[1:])
names = ["transformer.h.0." + w for w in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
assert nv["recipe"] == "nvfp4" and [x["name"] for x in nv["layers"]] == names, nv
for a, b in zip(nv["layers"], f8["layers"]):
    for d, ops in (("forward", ("input", "weight")), ("input_gradient", ("grad_output", "weight")),
                   ("weight_gradient", ("grad_output", "input"))):
        assert a[d]["gemms"] == 4 and 0 < a[d]["output_error"] < 1, a
        assert a[d]["output_error"] > 2 * b[d]["output_error"] > 0, (a[d], b[d])  # 4 bits against 8
        assert all(0 <= b[d][o]["flushed_fraction"] < 1 and b[d][o]["error"] > 0 for o in ops), b[d]
m = {x["name"]: x for x in mixed["layers"]}
assert m[names[2]]["forward"]["gemms"] == 0 and m[names[2]]["forward"]["output_error"] is None, m[names[2]]
assert m[names[0]]["forward"]["gemms"] == 4
PY
then ok; else fail "the recipe probe"; fi
expect 2 "$M" "${GT[@]}" --precision fp32 --probe nvfp4 --steps 1 && one_line && has "$err" 'bf16 with fp32 master weights'
expect 2 "$M" "${GT[@]}" --precision bf16-pure --probe nvfp4 --steps 1 && one_line && has "$err" 'not in bf16-pure'
expect 2 "$M" "${GT[@]}" --precision mxfp8 --probe nvfp4 --steps 1 && one_line && has "$err" 'every one runs in mxfp8'
expect 2 "$M" "${GT[@]}" --precision bf16 --probe fp16 --steps 1 && one_line && has "$err" "--probe fp16: the recipe is"
expect 2 "$M" train --model mlp:784-16-10 --precision bf16 --probe nvfp4 --steps 1 && one_line && has "$err" 'the MLP has no probe'
# mixprec advise: the runs, (b) from their losses, the proposal as its rule says from (a) and the whole recipe's
# cost, the proposal's file taken by --layer-precision
ADV=(advise --recipe nvfp4 --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --steps 30 --lr 1e-2 --threads 1)
advise_check() { # BUDGET: advise's output in $out, checked
    ADVISED="$out" python3 - "$1" <<'PY'
import os, re, sys
budget, text = float(sys.argv[1]), os.environ["ADVISED"]
runs = {}
for mode, seed, v in re.findall(r"^  (\S.*?)\s+seed (\d): validation loss ([0-9.]+|nan)", text, re.M):
    runs[(mode.replace(", with the probe", ""), int(seed))] = float(v)
names = ["transformer.h.0." + w for w in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
assert len(runs) >= 2 * (len(names) + 2), runs
rel = lambda mode: sum(100 * (runs[(mode, k)] - runs[("bf16", k)]) / runs[("bf16", k)] for k in (1, 2)) / 2
rows = re.findall(r"^  (transformer\S+) +([0-9.]+) / ([0-9.]+) / ([0-9.]+) +([0-9.]+) +([-+][0-9.]+)% \+-([0-9.]+)% +([-+][0-9.]+)%$",
                  text, re.M)
assert sorted(r[0] for r in rows) == names, rows
score = {}
for name, f, d, w, sc, b, spread, pred in rows:
    assert abs(float(sc) - ((float(f)**2 + float(d)**2 + float(w)**2) / 3) ** 0.5) < 2e-4, (name, sc)
    assert abs(float(b) - rel(f"bf16+nvfp4={name}")) < 3e-3, (name, b, rel(f"bf16+nvfp4={name}"))
    score[name] = float(sc)
assert [r[0] for r in rows] == sorted(score, key=lambda n: -score[n]), "ranked by the score"
whole = rel("nvfp4")
kept = int(re.search(r"^the proposal: (\d+) of 4 layers kept in bf16$", text, re.M).group(1))
total, order = sum(v * v for v in score.values()), sorted(score, key=lambda n: -score[n])
want = next(k for k in range(5) if k == 4 or whole * sum(score[n] ** 2 for n in order[k:]) / total <= budget)
assert kept == want, (kept, want, whole, budget)
assert re.search(r"^(held|did not hold): the advised assignment \(%d of 4 layers in nvfp4\)" % (4 - kept), text, re.M)
assert re.search(r"Spearman\): (-?[0-9.]+|nan) over 4 layers$", text, re.M)
print(whole)
PY
}
if expect 0 "$M" "${ADV[@]}" --budget 0 --layers-out "$T/adv.layers" && whole=$(advise_check 0) && [ -n "$whole" ]; then ok
else fail "mixprec advise --budget 0: $out"; fi
half=$(python3 -c "print(max(float('$whole') / 2, 0))")
if expect 0 "$M" "${ADV[@]}" --budget "$half" --layers-out "$T/adv.layers" --summary "$T/adv.json" &&
   advise_check "$half" > /dev/null && python3 - "$T/adv.json" "$T/adv.layers" "$half" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["recipe"] == "nvfp4" and j["budget"] == float(sys.argv[3]) and j["seeds"] == [1, 2], j
assert len(j["layers"]) == 4 and j["kept"] == sum(x["kept_in_bf16"] for x in j["layers"]), j
assert j["layer_precision"] == open(sys.argv[2]).read(), j["layer_precision"]
for x in j["layers"]:
    v, b = x["alone"]["val_loss"], j["bf16"]["val_loss"]
    assert abs(x["alone"]["vs_bf16"] - sum(100 * (v[k] - b[k]) / b[k] for k in (0, 1)) / 2) < 1e-9, x
PY
then ok; else fail "mixprec advise --budget $half: $out"; fi
mode=$(sed -n '1s/.*with --precision \([a-z0-9-]*\)$/\1/p' "$T/adv.layers")
expect 0 "$M" "${GT[@]}" --precision "$mode" --layer-precision "$T/adv.layers" --steps 2
expect 2 "$M" advise --model gpt:1-2-16-16 && one_line && has "$err" '--recipe is needed'
expect 2 "$M" "${ADV[@]}" --precision bf16 && one_line && has "$err" '--precision is set by advise itself'
expect 2 "$M" "${ADV[@]}" --budget x && one_line && has "$err" "--budget wants a percentage"
expect 2 "$M" advise --recipe nvfp4 --model mlp:784-16-10 && one_line && has "$err" 'the MLP has no probe'
expect 1 "$M" "${ADV[@]}" --layers-out "$T/nodir/x.layers" && one_line && has "$err" 'does not exist'
# a mode that fails before its first step leaves the directory's files as they were
( cd "$T/cmp" && sha256sum * > "$T/cmp.sums" )
expect 1 "$M" compare --precisions fp32 --out "$T/cmp" --model gpt:1-2-16-16 --data "text:$T/nope.txt" --batch 4 --steps 3 &&
    one_line && has "$err" 'nope.txt: cannot open' # the run's own reason, once
if ( cd "$T/cmp" && sha256sum -c --quiet "$T/cmp.sums" ) && [ -z "$(ls -A "$T/cmp" | grep partial)" ]; then ok
else fail "a compare that failed before its first step changed its directory"; fi
expect 2 "$M" compare --save "$T/x.st" && one_line && has "$err" 'set by compare itself'
expect 2 "$M" compare --dump-grads "$T/x.st" && one_line && has "$err" 'each mode would write over the last'
[ ! -e "$T/x.st" ] && ok || fail "a refused compare wrote --dump-grads"
# DIR holds the files of one run: a later mode that fails before its first step (its checkpoint's mode differs)
# leaves the new run's files, summary.json naming the mode; the old run's other files go, a user's file and an
# input the old run wrote stay
echo mine > "$T/cmp/notes.txt"
CMPR=(compare --model gpt:1-2-16-16 --batch 4 --steps 4) # then --data, --out
expect 1 "$M" "${CMPR[@]}" --data "text:$T/c.txt" --out "$T/cmp" --precisions bf16,fp32 --resume "$T/cmp/bf16.ckpt" && one_line && has "$err" "checkpoint has precision 'bf16', this run asks for 'fp32'"
if [ "$(cd "$T/cmp" && ls -A | tr '\n' ' ')" = "bf16.ckpt bf16.csv bf16.json bf16.txt notes.txt report.html summary.json " ] &&
   [ "$(wc -l < "$T/cmp/bf16.csv")" -eq 2 ]; then ok
else fail "compare with a failed later mode left: $(ls -A "$T/cmp")"; fi
python3 - "$T/cmp/summary.json" <<'PY' && ok || fail "summary.json of a compare with a failed mode"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["files"] == ["bf16.csv", "bf16.json", "bf16.txt", "report.html"], s["files"]
assert [f["mode"] for f in s["failed"]] == ["fp32"] and "checkpoint has precision 'bf16'" in s["failed"][0]["error"], s["failed"]
assert [r["precision"] for r in s["runs"]] == ["bf16"]
PY
expect 0 "$M" "${CMPR[@]}" --data "text:$T/c.txt" --out "$T/cmp" --precisions fp32
if [ "$(cd "$T/cmp" && ls -A | tr '\n' ' ')" = "bf16.ckpt fp32.csv fp32.json fp32.txt notes.txt report.html summary.json " ]; then ok
else fail "compare after the failed one left: $(ls -A "$T/cmp")"; fi
mkdir -p "$T/cmpf" && : > "$T/cmpf/.partial"
expect 1 "$M" "${CMPR[@]}" --data "text:$T/c.txt" --precisions fp32 --out "$T/cmpf" && one_line && has "$err" 'cmpf/.partial is not a directory'
mkdir "$T/cmp/.partial" && cp "$T/c.txt" "$T/cmp/.partial/fp32.txt" # what a failed comparison left, taken as a corpus
expect 2 "$M" "${CMPR[@]}" --precisions fp32 --data "text:$T/cmp/.partial/fp32.txt" --out "$T/cmp" && one_line &&
    has "$err" 'cmp/.partial/fp32.txt is the file --data reads: an output never replaces an input'
cmp -s "$T/c.txt" "$T/cmp/.partial/fp32.txt" && ok || fail "a refused compare changed its input in DIR/.partial"
rm -r "$T/cmp/.partial"
: > "$T/empty.txt"
head -c 20 "$T/c.txt" > "$T/short.txt"
GNODATA=(train --model gpt:1-2-16-16 --batch 4 --threads 2 --lr 3e-3) # GT without --data
expect 1 "$M" "${GNODATA[@]}" --steps 1 --data "text:$T/nope" && one_line && has "$err" 'nope: cannot open'
expect 1 "$M" "${GNODATA[@]}" --steps 1 --data "text:$T/empty.txt" && one_line && has "$err" 'is empty'
expect 1 "$M" "${GNODATA[@]}" --steps 1 --data "text:$T/short.txt" && one_line && has "$err" 'needs at least 18'
# a value capped is reported as given and as used
expect 0 "$M" "${GT[@]}" --steps 1 --eval-windows 100000 && has "$out" '^  --eval-windows 100000: the corpus has [0-9]+ validation windows, all of them are used$'
# a model that cannot fit is refused before its memory is taken, saying how much it needs and how much there is
expect 1 "$M" train --model mlp:784-65536-65536-65536-65536-10 --steps 1 && one_line &&
    has "$err" 'needs about [0-9.]+ GiB .*, and [0-9.]+ GiB are available'
# a corpus is regular files: a device is not read without end, a FIFO without a writer does not block
expect 1 timeout 20 "$M" "${GNODATA[@]}" --steps 1 --data "text:/dev/zero" && one_line && has "$err" '/dev/zero is a device, not a regular file'
mkfifo "$T/fifo.txt"
expect 1 timeout 20 "$M" "${GNODATA[@]}" --steps 1 --data "text:$T/fifo.txt" && one_line && has "$err" 'fifo.txt is a FIFO, not a regular file'
rm -f "$T/fifo.txt"
expect 2 "$M" train --model gpt:1-3-16-16 --data "text:$T/c.txt" --steps 1 && one_line && has "$err" 'do not divide the width'
expect 2 "$M" train --model gpt:x --data "text:$T/c.txt" --steps 1 && one_line
# an option given twice, or one that does nothing for the model, optimizer, schedule or launch, is a usage error
expect 2 "$M" "${GT[@]}" --steps 1 --lr 1e-3 && one_line && has "$err" -- '--lr is given twice'
expect 2 "$M" "${GT[@]}" --steps 1 --act gelu && one_line && has "$err" -- '--act .* does nothing for the GPT'
expect 2 "$M" "${GT[@]}" --steps 1 --hist-every 2 && one_line && has "$err" -- '--hist-every .* does nothing for the GPT'
expect 2 "$M" "${TR[@]}" --steps 1 --gelu erf && one_line && has "$err" -- '--gelu .* does nothing for the MLP'
expect 2 "$M" "${TR[@]}" --steps 1 --momentum 0.9 && one_line && has "$err" -- "--momentum is SGD's"
expect 2 "$M" "${TR[@]}" --steps 1 --optimizer sgd --betas 0.9,0.95 && one_line && has "$err" -- "--betas are AdamW's"
expect 2 "$M" "${TR[@]}" --steps 1 --min-lr 1e-5 && one_line && has "$err" -- '--min-lr .* constant rate'
expect 2 "$M" "${TR[@]}" --steps 1 --save-dtype bf16 && one_line && has "$err" -- '--save-dtype does nothing without --save'
expect 2 "$M" "${TR[@]}" --steps 1 --allreduce bf16 && one_line && has "$err" -- '--allreduce does nothing in one process'
expect 2 "$M" "${TR[@]}" --steps 3 --warmup 3 && one_line && has "$err" -- "--warmup 3 is not shorter than the run's 3 steps"
expect 2 "$M" "${TR[@]}" --steps 1 --precision bf16 --init-scale 1024 && one_line && has "$err" 'do nothing for bf16: it has no loss scaling'
expect 0 "$M" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --steps 1 --precisions fp32,fp16-dynamic \
    --init-scale 1024 --out "$T/cmps" # the scaled modes take them
expect 2 "$M" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --precisions fp32, --out "$T/never" && one_line &&
    has "$err" 'has an empty entry'
expect 2 "$M" compare --out "$T/never" --out "$T/never2" && one_line && has "$err" -- '--out is given twice'
# twelve modes side by side (the accuracy budget's CI comparison has eleven), each with its own colour; not thirteen
M12=fp32,fp16,fp16-dynamic,bf16,bf16-pure,fp8-delayed,fp8-current,mxfp8,nvfp4,bf16+optim-state=8bit,bf16+master-weights=kahan,fp16-naive
expect 0 "$M" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --steps 1 --precisions "$M12" --out "$T/cmp12"
python3 - "$T/cmp12/summary.json" "$T/cmp12/report.html" <<'PY' && ok || fail "a comparison of twelve modes"
import json, re, sys
runs = json.load(open(sys.argv[1]))["runs"]
html = open(sys.argv[2]).read()
legend = re.findall(r'fill="(#[0-9a-f]{6})"/><text x="(\d+)" y="(\d+)" class="legend">([^<]+)</text>', html)
colours = {name: c for c, x, y, name in legend}
assert len(runs) == 12, len(runs)
assert len(set(colours[r["precision"]] for r in runs)) == 12, colours
# the labels wrap onto rows inside the 960-wide charts (a label is about 6.6 px a byte at 12 px)
assert len({y for c, x, y, name in legend}) >= 2, legend
assert all(int(x) + 6.6 * len(name) <= 960 for c, x, y, name in legend), legend
PY
expect 2 "$M" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --precisions "$M12,fp16-static:1024" --out "$T/never" &&
    one_line && has "$err" 'at most 12 precisions'
LONG=$(printf 'bf16+master-weights=kahan+optim-state=8bit+reductions=half,%.0s' $(seq 14))
expect 2 "$M" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --precisions "${LONG%,}" --out "$T/never" &&
    one_line && has "$err" 'at most 12 modes of up to 63 bytes'
if [ ! -e "$T/never" ] && [ ! -e "$T/never2" ]; then ok; else fail "a refused compare made its directory"; fi
# which tensor overflowed: block 1's c_fc weight times 1e6 makes its activation the
# first to overflow in fp16; the skipped step names it, and names exactly the
# gradients that hold inf or NaN (recounted from --dump-grads)
G2=(train --model gpt:2-2-16-16 --data "text:$T/c.txt" --batch 4 --threads 2)
expect 0 "$M" "${G2[@]}" --steps 1 --save "$T/w.st"
scale_tensor "$T/w.st" "$T/big.st" transformer.h.1.mlp.c_fc.weight 1e6
expect 0 "$M" "${G2[@]}" --precision fp16-dynamic --steps 1 --init "$T/big.st" --summary "$T/big.json" --dump-grads "$T/big.grads"
has "$out" '^  step 1 skipped, scale 65536 -> 32768: (inf|NaN) in transformer\..* \(grad\)( and [0-9]+ more)?; first overflowing activation h\.1\.mlp\.c_fc$'
if python3 - "$T/big.json" "$T/big.grads" <<'PY'
import json, math, struct, sys
sk = json.load(open(sys.argv[1]))["skipped"]
b = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
bad = []
for name, t in h.items():
    if name == "__metadata__":
        continue
    lo, hi = t["data_offsets"]
    if any(not math.isfinite(x) for x in struct.unpack(f"<{(hi - lo) // 4}f", b[8 + n + lo:8 + n + hi])):
        bad.append(name)
assert len(sk) == 1 and sk[0]["step"] == 1 and sk[0]["scale"] == 65536, sk
assert sk[0]["first_activation"] == "h.1.mlp.c_fc", sk[0]["first_activation"]
named = [t + ".grad" for t in sk[0]["tensors"] if t + ".grad" in h]  # the dump holds the 2-D weights
assert bad and sorted(named) == sorted(bad), (named, bad)
PY
then ok; else fail "the overflowing tensor is named"; fi

# an output never replaces an input, nor another output: usage errors naming both options, every file unchanged
mkdir -p "$T/careless/corpus" && cp "$T/c.txt" "$T/careless/corpus/c.txt" && cp "$T/g.st" "$T/careless/g.st"
ln "$T/careless/g.st" "$T/careless/hard.st"
echo "an old log" > "$T/careless/old.csv"
( cd "$T/careless" && find . -type f -print0 | sort -z | xargs -0 sha256sum > "$T/careless.sums" )
careless() { # careless MESSAGE ARGS...: exit 2, one line with MESSAGE
    local want=$1; shift
    expect 2 "$M" "$@" && one_line && has "$err" "$want"
}
careless "--log .*g.st is the file --resume reads" "${GT[@]}" --steps 14 --resume "$T/careless/g.st" --log "$T/careless/g.st"
careless "--summary .*hard.st is the file --resume reads" "${GT[@]}" --steps 14 --resume "$T/careless/g.st" --summary "$T/careless/hard.st"
careless "--save .* is the file --init reads" "${GT[@]}" --steps 1 --init "$T/careless/g.st" --save "$T/careless/./g.st"
careless "--dump-grads .* is the file --data reads" "${GT[@]}" --steps 1 --dump-grads "$T/c.txt"
careless "--log and --save name the same file" "${GT[@]}" --steps 1 --save "$T/careless/old.csv" --log "$T/careless/../careless/old.csv"
careless "--summary and --dump-grads name the same file" "${GT[@]}" --steps 1 --summary "$T/careless/new.json" --dump-grads "$T/careless/new.json"
careless "--log .* is inside the corpus directory" train --model gpt:1-2-16-16 --data "text:$T/careless/corpus" --batch 4 --steps 1 --log "$T/careless/corpus/log.csv"
careless "--save is empty" "${GT[@]}" --steps 1 --save ""
careless "fp32 is in --precisions twice" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --steps 1 --precisions fp32,fp32 --out "$T/careless/cmp"
careless "cmp/fp32.csv is the file --init reads" compare --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --steps 1 --precisions fp32 --init "$T/careless/cmp/fp32.csv" --out "$T/careless/cmp"
# a checkpoint whose weights hold a NaN is refused naming it, as --init names its file
python3 - "$T/careless/g.st" "$T/nan.st" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
name = [k for k in h if k != "__metadata__" and h[k]["dtype"] == "F32"][0]
off = 8 + n + h[name]["data_offsets"][0]
b[off:off + 4] = struct.pack("<f", float("nan")); open(sys.argv[2], "wb").write(b)
PY
expect 1 "$M" "${GT[@]}" --precision bf16 --steps 14 --resume "$T/nan.st" && one_line && has "$err" 'nan.st: .*non-finite'
# a directory where a file is expected is said to be one; an MLP's checkpoint is no GPT for sample (a data error)
expect 1 "$M" "${GT[@]}" --steps 1 --init "$T/careless" && one_line && has "$err" 'careless is a directory, not a regular file'
expect 0 "$M" train --model mlp:784-16-10 --data "$T/fmnist" --steps 1 --save "$T/mlp.st"
expect 1 "$M" sample --from "$T/mlp.st" && one_line && has "$err" 'mlp.st holds mlp:784-16-10, not a GPT'
# a checkpoint whose metadata names a model its tensors are not is refused before that model's memory is taken
python3 - "$T/careless/g.st" "$T/big.st" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h["__metadata__"]["model"] = "gpt:64-64-8192-8192"
hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
expect 1 "$M" sample --from "$T/big.st" --tokens 5 && one_line && has "$err" 'big.st: its tensors are not those of gpt:64-64-8192-8192'
# outputs that cannot be written are found before anything is read or trained: exit 1, one line naming them
mkfifo "$T/careless/fifo"
expect 1 "$M" "${GT[@]}" --steps 1 --save "$T/careless/nodir/x.st" && one_line && has "$err" -- '--save .*nodir/x.st: the directory .*nodir does not exist'
expect 1 "$M" "${GT[@]}" --steps 1 --log /dev/null && one_line && has "$err" -- '--log /dev/null is a device, not a regular file'
expect 1 "$M" "${GT[@]}" --steps 1 --summary "$T/careless/fifo" && one_line && has "$err" -- 'is a FIFO, not a regular file'
expect 1 "$M" "${GT[@]}" --steps 1 --dump-grads "$T/careless/corpus" && one_line && has "$err" -- 'is a directory, not a regular file'
rm "$T/careless/fifo"
if ( cd "$T/careless" && sha256sum -c --quiet "$T/careless.sums" ) && [ ! -e "$T/careless/new.json" ] && [ ! -e "$T/careless/cmp" ] &&
   [ ! -e "$T/careless/corpus/log.csv" ]; then ok; else fail "a refused run changed or created a file"; fi

# the per-tensor counts: each step's CSV columns add up to the run's JSON figures
expect 0 "$M" "${GT[@]}" --precision fp16-static:1e30 --steps 3 --summary "$T/pt.json" --log "$T/pt.csv"
if python3 - "$T/pt.json" "$T/pt.csv" <<'PY'
import csv, json, sys
j = json.load(open(sys.argv[1])); rows = list(csv.DictReader(open(sys.argv[2])))
tot = {"overflow": 0, "nan": 0}
for t in j["tensors"]:
    n = t["name"]
    o = sum(int(r["overflow_" + n]) for r in rows); z = sum(int(r["nan_" + n]) for r in rows)
    assert o == t["overflow"] and z == t["nan"] + t["act_nan"], (n, o, z, t)
    assert all(0 <= float(r["act_underflow_" + n]) <= 1 and 0 <= float(r["act_subnormal_" + n]) <= 1 for r in rows)
    tot["overflow"] += o; tot["nan"] += z
assert tot["overflow"] == j["gradient_overflow"] > 0 and tot["nan"] > 0, (tot, j["gradient_overflow"])
PY
then ok; else fail "per-tensor overflow/NaN columns against the summary"; fi
expect 2 "$M" "${TR[@]}" --precision fp32 --reductions half --steps 1 && one_line && has "$err" 'fp16 or bf16'
expect 2 "$M" "${TR[@]}" --precision fp16 --reductions fp16 --steps 1 && one_line && has "$err" 'fp32 or half'
expect 2 "$M" "${TR[@]}" --precision fp16+reductions=halfish --steps 1 && one_line && has "$err" 'reductions=fp32\|half'
expect 2 "$M" compare --precisions fp32+master-weights=none --out "$T/cmw2" --steps 1 && one_line
# a loss scale whose inverse is not finite in fp32 (1/S would make every unscaled gradient inf) refused up front, named
expect 2 "$M" "${TR[@]}" --precision fp16-dynamic --init-scale 1e-40 --steps 1 && one_line &&
    has "$err" '--init-scale 1e-40: 1/S is not finite in fp32'
expect 2 "$M" "${TR[@]}" --precision fp16-static:1e-40 --steps 1 && one_line && has "$err" "fp16-static:S .* not '1e-40'"
expect 2 "$M" "${TR[@]}" --precision fp16-static:2.9e-39 --steps 1 && one_line && has "$err" 'inverse is finite'
# a number that is 0 in fp32 though it is not: an option refused, a cast input reported as what happened to it
expect 2 "$M" "${TR[@]}" --lr 1e-50 --steps 1 && one_line && has "$err" "--lr 1e-50 is below fp32's least subnormal"
expect 2 "$M" "${TR[@]}" --precision fp16-dynamic --min-scale 1e-46 --steps 1 && one_line && has "$err" '--min-scale 1e-46'
expect 0 "$M" cast --to bf16 1e-46 0 && has "$out" '^1e-46 .* underflow \(0 in fp32 already' && has "$out" '^0 .* exact$'
expect 0 "$M" cast --to mxfp8-e4m3 1e-46 1 && has "$out" '^1e-46 .* underflow \(0 in fp32 already'
# JSON and HTML outputs are UTF-8 whatever bytes a path holds: each byte that starts no UTF-8 sequence is
# written \ufffd (JSON) or as U+FFFD (HTML)
bad=$(printf 'd\xff\xc0\xaf\xed\xa0\x80')
expect 0 "$M" compare --model mlp:784-48-10 --data "$T/fmnist" --precisions fp32 --steps 1 --out "$T/$bad"
expect 0 "$M" "${TR[@]}" --steps 1 --summary "$T/$bad.json" --log "$T/$bad.csv" --save "$T/$bad.st"
if python3 - "$T" "$bad" <<'PY'
import json, os, struct, sys
t, bad = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
s = json.loads(open(t + b"/" + bad + b"/summary.json", "rb").read().decode("utf-8"))  # strict UTF-8
page = open(t + b"/" + bad + b"/report.html", "rb").read().decode("utf-8")  # the HTML page too (charset=utf-8)
assert "d\ufffd" in page, "the report names its directory"
assert s["command"].endswith("/d\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd"), s["command"]
json.loads(open(t + b"/" + bad + b".json", "rb").read().decode("utf-8"))
h = open(t + b"/" + bad + b".st", "rb").read()
json.loads(h[8:8 + struct.unpack("<Q", h[:8])[0]].decode("utf-8"))
PY
then ok; else fail "a JSON output holds bytes that are not UTF-8"; fi
# threads that cannot be started (each one's stack is the 4 GB ulimit -s against a 3 GB address space): one mixprec
# line before training, not OpenMP's runtime ending the process (the sanitizers need more address space: skipped)
if ! grep -qa __asan_init "$M"; then
    (ulimit -s 4000000 && ulimit -v 3000000 && exec "$M" "${TR[@]}" --steps 1) > /dev/null 2> "$T/thr.err"
    rc=$?; err=$(cat "$T/thr.err")
    if [ "$rc" -eq 1 ]; then ok; else fail "threads that cannot start: exit $rc"; fi
    one_line && has "$err" '^mixprec train: cannot start 2 threads \(the thread 2: .*\): fewer with --threads'
    for cmd in underflow tour "bench gemm --max 256" "cast 1e-3"; do # every command, before its first kernel
        (ulimit -s 4000000 && ulimit -v 3000000 && exec "$M" $cmd) > /dev/null 2> "$T/thr.err"
        rc=$?; err=$(cat "$T/thr.err")
        if [ "$rc" -eq 1 ]; then ok; else fail "$cmd with threads that cannot start: exit $rc"; fi
        one_line && has "$err" "^mixprec ${cmd%% *}: cannot start 2 threads"
    done
fi
# values that cannot be what was meant: an empty scale in a list, numbers past fp32's range named as such,
# --threads past what MIXPREC_THREADS takes
for v in '1,,2' '1,' ',1'; do
    expect 2 "$M" underflow --scales "$v" && one_line && has "$err" "--scales '$v' has an empty entry"
done
expect 2 "$M" scaler-sim --init-scale 1e39 && one_line && has "$err" "--init-scale 1e39 is past fp32's largest finite value"
expect 2 "$M" sample --from x.st --temperature 1e-50 && one_line && has "$err" "within fp32's range"
expect 2 "$M" train --threads 65 --steps 1 && one_line && has "$err" "--threads wants 1 .. 64"
# a switch said twice, in the mode and as an option, is a usage error whichever value would win
for sw in 'fp16-dynamic master-weights=none --master-weights fp32' 'fp16-dynamic optim-state=8bit --optim-state fp32' \
          'fp16-dynamic reductions=half --reductions fp32' 'mxfp8 mx-rule=floor --mx-rule rceil'; do
    set -- $sw
    expect 2 "$M" "${TR[@]}" --precision "$1+$2" "$3" "$4" --steps 1 --log "$T/twice.csv" && one_line &&
        has "$err" "\+${2%%=*} in the mode $1\+$2 and --${2%%=*} both given: say it once"
    expect 2 "$M" compare --model mlp:784-48-10 --precisions "$1,$1+$2" "$3" "$4" --out "$T/twice" --steps 1 &&
        one_line && has "$err" "$1\+$2: \+${2%%=*} in the mode"
done
[ ! -e "$T/twice.csv" ] && [ ! -e "$T/twice" ] && ok || fail "a refused switch wrote something"

# fp8/fp4 recipes: the quantized tensors' columns (only in a recipe run), their run figures in the summary
expect 0 "$M" "${GT[@]}" --precision fp8-current --steps 4 --log "$T/q.csv" --summary "$T/q.json"
has "$out" '^        bf16 \+ fp8 e4m3/e5m2: [0-9.]+% of the quantized values saturated( \(most in h\.0\.[a-z_.]+: [0-9.]+%\))?, [0-9.]+% flushed to zero( \(most in h\.0\.[a-z_.]+: [0-9.]+%\))?$'
if python3 - "$T/q.csv" "$T/q.json" "$T/g.csv" <<'PY'
import csv, json, math, struct, sys
rows, j = list(csv.DictReader(open(sys.argv[1]))), json.load(open(sys.argv[2]))
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
names = [f"h.0.{l}.{r}" for l in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj") for r in ("input", "weight", "grad")]
q = [k[len("qamax_"):] for k in rows[0] if k.startswith("qamax_")]
assert q == names, q
assert not any(k.startswith(("qamax_", "quant_")) for k in next(csv.DictReader(open(sys.argv[3])))), "a bf16 log has q columns"
assert j["recipe"] == "fp8-current" and j["format"] == "bf16 + fp8 e4m3/e5m2" and j["compute_format"] == "bf16"
assert [x["name"] for x in j["quantized"]] == names
for r in rows:
    for n in names:
        amax, scale = float(r["qamax_" + n]), float(r["qscale_" + n])
        assert 0 <= float(r["qsat_" + n]) <= 1 and 0 <= float(r["qflush_" + n]) <= 1, (n, r)
        # current scaling: the format's largest value over the tensor's own amax, in fp32 (%.9g keeps an fp32 exact)
        assert amax > 0 and f32(scale) == f32((57344.0 if n.endswith("grad") else 448.0) / f32(amax)), (n, amax, scale)
    assert 0 <= float(r["quant_saturated"]) <= 1 and 0 <= float(r["quant_flushed"]) <= 1, r
for x in j["quantized"]:
    n = x["name"]
    assert x["format"] == ("e5m2" if n.endswith("grad") else "e4m3"), x
    assert x["amax"] == max(f32(float(r["qamax_" + n])) for r in rows) and x["scale"] == f32(float(rows[-1]["qscale_" + n])), x
    assert x["values"] > 0 and x["saturated_fraction"] == x["saturated"] / x["values"], x
    # each step quantizes as many values: the run's share is the mean of the steps'
    assert abs(x["flushed_fraction"] - sum(float(r["qflush_" + n]) for r in rows) / len(rows)) < 1e-6, x
tot = sum(x["values"] for x in j["quantized"])
assert abs(j["quant_flushed_fraction"] - sum(x["flushed"] for x in j["quantized"]) / tot) < 1e-12
assert abs(j["quant_flushed_fraction"] - sum(float(r["quant_flushed"]) for r in rows) / len(rows)) < 1e-6
PY
then ok; else fail "quantized tensors in the log and the summary"; fi
# checkpoints keep the quantization state: fp8-delayed's amax histories and scales, nvfp4's random streams; a
# 3 + 3 step run ends bit-identical to a 6 step run (and differs when the state is put back to its start)
for p in fp8-delayed nvfp4; do
    expect 0 "$M" "${GT[@]}" --precision $p --steps 6 --save "$T/q6.st"
    expect 0 "$M" "${GT[@]}" --precision $p --steps 3 --save "$T/q3.st"
    expect 0 "$M" "${GT[@]}" --precision $p --steps 6 --resume "$T/q3.st" --save "$T/q33.st"
    if cmp -s "$T/q6.st" "$T/q33.st"; then ok; else fail "$p: resume differs from an uninterrupted run"; fi
    python3 - "$T/q3.st" "$T/q3r.st" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), bytearray(b[8 + n:])
m = h["__metadata__"]
for k in m:  # each tensor's state as at the start: seed kept, counter, position 0, scale 1
    if k.startswith("quant."): m[k] = m[k][:16] + "00" * 16 + struct.pack("<f", 1.0).hex()
for k, t in h.items():
    if k.endswith(".amax_history"): data[t["data_offsets"][0]:t["data_offsets"][1]] = bytes(t["data_offsets"][1] - t["data_offsets"][0])
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(data))
PY
    expect 0 "$M" "${GT[@]}" --precision $p --steps 6 --resume "$T/q3r.st" --save "$T/q33r.st"
    if ! cmp -s "$T/q6.st" "$T/q33r.st"; then ok; else fail "$p: the quantization state made no difference"; fi
done
if python3 - "$T/q3.st" "$T/q6.st" <<'PY'
import json, struct, sys
def header(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
h3, _ = header(sys.argv[1])
m = h3["__metadata__"]
assert m["recipe"] == "nvfp4 2d_weights=1 stochastic_rounding=1 rht=1 rht_signs=0xd7e8", m["recipe"]
assert not any(k.endswith(".amax_history") for k in h3)
st = {k[6:]: bytes.fromhex(v) for k, v in m.items() if k.startswith("quant.")}
assert len(st) == 12 and all(len(v) == 28 for v in st.values()), st
seed, counter = struct.unpack("<QQ", st["h.0.mlp.c_fc.grad"][:16])
assert counter > 0 and struct.unpack("<Q", st["h.0.mlp.c_fc.input"][8:16])[0] == 0  # only gradients round stochastically
PY
then ok; else fail "nvfp4 checkpoint state"; fi
expect 0 "$M" "${GT[@]}" --precision fp8-delayed --steps 3 --save "$T/d3.st"
if python3 - "$T/d3.st" <<'PY'
import json, math, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), b[8 + n:]
assert h["__metadata__"]["recipe"] == "fp8-delayed amax_history_len=1024 amax_compute_algo=max margin=0"
t = h["quant.h.0.mlp.c_fc.grad.amax_history"]
assert t["dtype"] == "F32" and t["shape"] == [1024], t
lo, hi = t["data_offsets"]
hist = struct.unpack("<1024f", data[lo:hi])
seed, counter, pos = struct.unpack("<QQQ", bytes.fromhex(h["__metadata__"]["quant.h.0.mlp.c_fc.grad"])[:24])
scale = struct.unpack("<f", bytes.fromhex(h["__metadata__"]["quant.h.0.mlp.c_fc.grad"])[24:])[0]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
# three steps' amaxes in slots 0..2, the next step's scale from their max (E5M2: 57344 / amax)
assert pos == 3 and all(a > 0 for a in hist[:3]) and not any(hist[3:]), (pos, hist[:4])
assert scale == f32(57344.0 / max(hist)), (scale, max(hist))
PY
then ok; else fail "fp8-delayed checkpoint state"; fi
# refused: another recipe or settings, and missing or damaged state
expect 1 "$M" "${GT[@]}" --precision fp8-current --steps 6 --resume "$T/d3.st" && one_line && has "$err" "precision 'fp8-delayed'"
expect 0 "$M" "${GT[@]}" --precision mxfp8 --steps 2 --save "$T/mx2.st"
expect 1 "$M" "${GT[@]}" --precision mxfp8 --mx-rule floor --steps 4 --resume "$T/mx2.st" && one_line &&
    has "$err" "recipe 'mxfp8 scale_rule=rceil', this run asks for 'mxfp8 scale_rule=floor'"
expect 1 "$M" "${GT[@]}" --precision bf16 --steps 6 --resume "$T/d3.st" && one_line && has "$err" "precision 'fp8-delayed'"
# edit_ckpt SRC DST PYTHON: a copy of checkpoint SRC with the header h (and its metadata m) changed by PYTHON
edit_ckpt() {
    python3 - "$@" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); m = h["__metadata__"]
exec(sys.argv[3])
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
}
edit_ckpt "$T/d3.st" "$T/d3a.st" 'del m["quant.h.0.attn.c_proj.weight"]'
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3a.st" && one_line &&
    has "$err" "quantization state 'quant.h.0.attn.c_proj.weight' missing or damaged"
edit_ckpt "$T/d3.st" "$T/d3b.st" 'm["quant.h.0.mlp.c_fc.input"] = m["quant.h.0.mlp.c_fc.input"][:-2]'
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3b.st" && one_line && has "$err" "'quant.h.0.mlp.c_fc.input' missing"
k=quant.h.0.mlp.c_proj.grad.amax_history
edit_ckpt "$T/d3.st" "$T/d3c.st" "h['$k.old'] = h.pop('$k')"
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3c.st" && one_line &&
    has "$err" "amax history '$k' missing or not F32 \[1024\]"
edit_ckpt "$T/d3.st" "$T/d3c.st" "h['$k'].update(dtype='F16', shape=[2048])"
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3c.st" && one_line && has "$err" "amax history '$k'"
edit_ckpt "$T/d3.st" "$T/d3d.st" 'k = "quant.h.0.mlp.c_fc.grad"; m[k] = m[k][:32] + struct.pack("<Q", 1024).hex() + m[k][48:]'
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3d.st" && one_line && has "$err" 'history position 1024 of 1024'
edit_ckpt "$T/d3.st" "$T/d3e.st" 'del m["recipe"]'
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3e.st" && one_line && has "$err" "checkpoint has recipe 'none', this run asks for 'fp8-delayed amax_history_len=1024"

# every field a checkpoint holds is checked before it is used: one value of each kind of tensor damaged (the
# optimizer's moments in each state format, block scales and codes, the Kahan compensation, the scaler's blob,
# an amax history), each refused in one line naming the tensor or field and the rule
# poke SRC DST TENSOR INDEX FORMAT VALUE: a copy of SRC with element INDEX of TENSOR packed as FORMAT (struct)
poke() {
    python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name, i, fmt, v = sys.argv[1:7]
b = bytearray(open(src, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
v = int(v, 0) if fmt in "BH" else float(v)
off = 8 + n + h[name]["data_offsets"][0] + int(i) * struct.calcsize("<" + fmt)
b[off:off + struct.calcsize("<" + fmt)] = struct.pack("<" + fmt, v); open(dst, "wb").write(b)
PY
}
G1=(train --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --threads 2) W0=optim.transformer.wte.weight
for st in fp32 bf16 fp8 8bit 4bit; do
    expect 0 "$M" "${G1[@]}" --precision bf16 --optim-state $st --steps 2 --save "$T/os_$st.st" || continue
    bad() { # bad CASE TENSOR INDEX FORMAT VALUE PATTERN
        poke "$T/os_$st.st" "$T/os_bad.st" "$2" "$3" "$4" "$5"
        expect 1 "$M" "${G1[@]}" --precision bf16 --optim-state $st --steps 4 --resume "$T/os_bad.st" && one_line &&
            has "$err" "os_bad.st: optimizer state '$2' .*$6" || echo "  ($st: $1)" >&2
    }
    case $st in
        fp32) bad "exp_avg inf" $W0.state1 3 f inf "\(exp_avg\) holds inf at element 3: its values are finite"
              bad "exp_avg_sq < 0" $W0.state2 5 f -1 "\(exp_avg_sq\) holds -1 at element 5: a second moment is finite and >= 0" ;;
        bf16) bad "exp_avg NaN" $W0.state1 0 H 0x7fc0 "\(exp_avg\) holds nan at element 0"
              bad "exp_avg_sq < 0" $W0.state2 7 H 0xbf80 "\(exp_avg_sq\) holds -1 at element 7: a second moment" ;;
        fp8)  bad "exp_avg code NaN" $W0.state1 2 B 0x7f "holds code 127 \(nan\) at element 2: not a value of the format's map"
              bad "exp_avg_sq code < 0" $W0.state2 4 B 0xb8 "\(exp_avg_sq\) holds code 184 \(-1\) at element 4: a second moment is >= 0"
              bad "scale 0" $W0.state2.scale 1 f 0 "holds 0 at block 1: a block's scale is finite and > 0" ;;
        8bit) bad "scale inf" $W0.state1.scale 0 f inf "\(exp_avg\) holds inf at block 0: a block's scale is finite and > 0"
              bad "scale < 0" $W0.state2.scale 15 f -2 "\(exp_avg_sq\) holds -2 at block 15" ;;
        4bit) bad "scale NaN" $W0.state1.scale 3 f nan "holds nan at block 3: a block's scale" ;;
    esac
done
expect 0 "$M" "${G1[@]}" --precision bf16 --master-weights kahan --steps 2 --save "$T/kahan.st"
poke "$T/kahan.st" "$T/kahan_bad.st" $W0.comp 9 H 0x7f80 # bf16 +inf
expect 1 "$M" "${G1[@]}" --precision bf16 --master-weights kahan --steps 4 --resume "$T/kahan_bad.st" && one_line &&
    has "$err" "optimizer state '$W0.comp' \(the Kahan compensation\) holds inf at element 9"
expect 0 "$M" "${G1[@]}" --optimizer sgd --momentum 0.9 --steps 2 --save "$T/sgd.st"
poke "$T/sgd.st" "$T/sgd_bad.st" $W0.state1 1 f -inf
expect 1 "$M" "${G1[@]}" --optimizer sgd --momentum 0.9 --steps 4 --resume "$T/sgd_bad.st" && one_line &&
    has "$err" "'$W0.state1' \(the momentum buffer\) holds -inf at element 1"
# the scaler's blob (CRC-32 recomputed, so that the field itself is what is refused)
expect 0 "$M" "${G1[@]}" --precision fp16-dynamic --steps 2 --save "$T/sc.st"
for c in "44|<f|float('inf')|scale inf is not finite and > 0" "44|<f|1e-39|scale 1e-39 has no finite inverse in fp32" \
         "48|<i|-1|growth tracker -1 is outside \[0, growth_interval 2000\)"; do
    IFS='|' read -r off fmt v want <<< "$c"
    edit_ckpt "$T/sc.st" "$T/sc_bad.st" "import zlib; x = bytearray.fromhex(m['scaler']); x[$off:$off + 4] = struct.pack('$fmt', $v); x[100:104] = struct.pack('<I', zlib.crc32(bytes(x[:100]))); m['scaler'] = x.hex()"
    expect 1 "$M" "${G1[@]}" --precision fp16-dynamic --steps 4 --resume "$T/sc_bad.st" && one_line &&
        has "$err" "sc_bad.st: metadata 'scaler': scaler blob: $want"
done
# weights kept only in the compute format (no fp32 masters) are checked as well
expect 0 "$M" train --model mlp:784-16-10 --data "$T/fmnist" --precision bf16 --master-weights none --steps 1 --save "$T/mh.st"
poke "$T/mh.st" "$T/mh_bad.st" fc1.weight 3 H 0x7fc0
expect 1 "$M" train --model mlp:784-16-10 --data "$T/fmnist" --precision bf16 --master-weights none --steps 2 \
    --resume "$T/mh_bad.st" && one_line && has "$err" "mh_bad.st: weights: 'fc1.weight' holds a non-finite value"
# an amax history holds magnitudes
poke "$T/d3.st" "$T/d3f.st" quant.h.0.mlp.c_fc.input.amax_history 0 f -1
expect 1 "$M" "${GT[@]}" --precision fp8-delayed --steps 6 --resume "$T/d3f.st" && one_line &&
    has "$err" "amax history 'quant.h.0.mlp.c_fc.input.amax_history' holds -1 at element 0: an amax is finite and >= 0"
# a checkpoint of another model: refused by --init and --resume naming both models (by its metadata), and without
# metadata by the tensors of layers the model does not have (never cut down to the model)
expect 0 "$M" train --model gpt:2-2-16-16 --data "text:$T/c.txt" --batch 4 --threads 2 --steps 1 --save "$T/g2.st"
expect 1 "$M" "${G1[@]}" --steps 1 --init "$T/g2.st" && one_line &&
    has "$err" -- "--init .*g2.st holds the weights of model gpt:2-2-16-16, this run's model is gpt:1-2-16-16"
expect 1 "$M" "${G1[@]}" --steps 3 --resume "$T/g2.st" && one_line &&
    has "$err" "g2.st: checkpoint has model 'gpt:2-2-16-16', this run asks for 'gpt:1-2-16-16'"
edit_ckpt "$T/g2.st" "$T/g2w.st" 'del h["__metadata__"]'
expect 1 "$M" "${G1[@]}" --steps 1 --init "$T/g2w.st" && one_line && has "$err" "'transformer.h.1.[a-z_0-9.]*' is beyond the model's 1 layer"
expect 0 "$M" train --model mlp:784-16-10-10 --data "$T/fmnist" --steps 1 --save "$T/m3.st"
expect 1 "$M" train --model mlp:784-16-10 --data "$T/fmnist" --steps 1 --init "$T/m3.st" && one_line &&
    has "$err" "holds the weights of model mlp:784-16-10-10, this run's model is mlp:784-16-10"
edit_ckpt "$T/m3.st" "$T/m3w.st" 'del h["__metadata__"]'
expect 1 "$M" train --model mlp:784-16-10 --data "$T/fmnist" --steps 1 --init "$T/m3w.st" && one_line &&
    has "$err" "'fc2.(weight|bias)' is not a tensor of this model \(2 layers\)"

# the ISA cap is honoured
MIXPREC_ISA=scalar expect 0 "$M" --version && has "$out" 'cpu path: scalar' && has "$out" 'cpu features: '
# MIXPREC_ISA only steps down: amx on a CPU without it keeps the detected path
best=$("$M" --version | sed -n 's/.*cpu path: \([a-z0-9]*\).*/\1/p')
MIXPREC_ISA=amx expect 0 "$M" --version && has "$out" "cpu path: $best"
# the environment's values are checked whole: a name in another case, a stray space, a number with a tail, out of
# range, signed or spaced, refused by every command (usage error, one line naming the variable and its value)
for v in SCALAR 'avx2 ' avx-512 ''x; do
    [ -z "$v" ] && continue
    MIXPREC_ISA="$v" expect 2 "$M" --version && one_line && has "$err" "^mixprec: MIXPREC_ISA=$v: not a CPU path"
done
MIXPREC_ISA='avx2 ' expect 2 "$M" formats && one_line && has "$err" 'MIXPREC_ISA=avx2 : not a CPU path'
for v in 1x 10000 0 -1 ' 2' +2 2.0 65; do
    MIXPREC_THREADS="$v" expect 2 "$M" formats && one_line && has "$err" "MIXPREC_THREADS=${v//+/\\+}: not a number of threads from 1 to 64"
done
MIXPREC_THREADS=64 expect 0 "$M" formats && MIXPREC_THREADS=1 expect 0 "$M" formats && MIXPREC_ISA= expect 0 "$M" formats
expect 0 "$M" bench peak --json && has "$out" '"fma_gflops"' && has "$out" '"dpbf16_gflops"' &&
    { [ "$best" != amx ] || has "$out" '"tdpbf16_gflops"'; }

# block formats (issue 15): cast and underflow with mxfp8-e4m3, mxfp8-e5m2 and nvfp4, block scaling against one scale per tensor
expect 0 "$M" cast --help && has "$out" 'mxfp8-e4m3\|mxfp8-e5m2\|nvfp4' && has "$out" 'flushed +a nonzero value became 0'
expect 0 "$M" underflow --help && has "$out" '--mx-rule floor\|rceil'
# one block, amax 448: rceil's 448 * fp32(1/448) rounds to 1, so the scale is 2^0 (0x7f); 1e-6 is below half of 2^-9
expect 0 "$M" cast --to mxfp8-e4m3 1 1e-6 448
has "$out" '^mxfp8-e4m3, rule rceil: 3 values as one tensor, 1 block of 32 \(29 zeros of padding\)$'
has "$out" '^block 0: scale 0x7f = 2\^0$'
has "$out" '^1 .* 0x38 +1 +0 +exact$' && has "$out" '^1e-6 .* 0x00 +0 +1 +flushed$' && has "$out" '^448 .* 0x7e +448 +0 +exact$'
has "$out" '^block scaling keeps as many values nonzero; mean relative error 0.333 vs 0.333$'
# two blocks, 32 x 448 then 1e-6: block 1's scale is 2^-28 (1e-6 / 448 = 2^-28.7, rounded up), 1e-6 * 2^28 = 268.4
# -> 256 (0x78), 256 * 2^-28 = 9.54e-7; one scale for the tensor (448 / 448 = 1) flushes it
expect 0 "$M" cast --to mxfp8-e4m3 $(printf '448 %.0s' {1..32}) 1e-6
has "$out" '^block 1: scale 0x63 = 2\^-28$' && has "$out" '^1e-6 .* 0x78 +9.53674316e-07 +0.0463 +rounded$'
has "$out" '^block scaling \(e8m0 scale per 32\) +0 +0.00% +0 +0.00% +33 +100.00% +0.001404$'
has "$out" '^one scale per tensor \(e4m3, 448/amax\) +1 +3.03% +0 +0.00% +32 +96.97% +0.0303$'
has "$out" '^block scaling keeps 1 more value nonzero \(3.03% of the nonzero values\); mean relative error 0.0014 vs 0.0303$'
# floor: scale 2^(8 - 8), 480 rounds past 448 (above 464): saturated, as the row counts; rceil: 2^1, 240 and 0.5 exact
expect 0 "$M" cast --to mxfp8-e4m3 --mx-rule floor 480 1 && has "$out" '^480 .* 0x7e +448 +0.0667 +saturated$' &&
    has "$out" '^block scaling .* +0 +0.00% +1 +50.00% +2 +100.00% '
expect 0 "$M" cast --to mxfp8-e4m3 480 1 && has "$out" '^block 0: scale 0x80 = 2\^1$' &&
    has "$out" '^480 .* 0x77 +480 +0 +exact$' && has "$out" '^1 .* 0x30 +1 +0 +exact$'
expect 0 "$M" cast --to mxfp8-e5m2 57344 -1 1e-9 && has "$out" '^57344 .* 0x7b +57344 +0 +exact$' &&
    has "$out" '^-1 .* 0xbc +-1 +0 +exact$' && has "$out" '^1e-9 .* 0x00 +0 +1 +flushed$'
# nvfp4: 16 x 6 then 0.006. g = 2688 / 6 = 448; block 1's scale e4m3(0.006 * 448 / 6 = 0.448) = 0.4375 (0x2e),
# the element 0.006 * 1024 = 6.14 -> 6 (0x7), 6 * 0.4375 * 6 / 2688 = 0.005859375; per tensor (6 / 6 = 1) it is flushed
expect 0 "$M" cast --to nvfp4 $(printf '6 %.0s' {1..15}) -6 0.006
has "$out" '^nvfp4: 17 values as one tensor, 2 blocks of 16 \(15 zeros of padding\); amax 6, global scale 2688/amax = 448$'
has "$out" '^block 0: scale 0x7e = 448 \(e4m3\)' && has "$out" '^-6 .* 0x0f +-6 +0 +exact$'
has "$out" '^block 1: scale 0x2e = 0.4375 \(e4m3\); value = e2m1 x 0.4375 x amax/2688 = e2m1 x 0.0009765625$'
has "$out" '^0.006 .* 0x07 +0.005859375 +0.0234 +rounded$'
has "$out" '^one scale per tensor \(e2m1, 6/amax\) +1 +5.88% '
has "$out" '^block scaling keeps 1 more value nonzero \(5.88% of the nonzero values\)'
# underflow from a file: 32 x -256 then 32 x 2^-30 (signs dropped); block scales fit both, 448/256 = 1.75 flushes 2^-30
python3 -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<64f", *([-256.0] * 32 + [2.0**-30] * 32)))' "$T/two.f32"
expect 0 "$M" underflow --from "$T/two.f32" --raw --format mxfp8-e4m3 --json
has "$out" '^\{"format": "mxfp8-e4m3", "rule": "rceil", "element": "e4m3", "block": 32, "n": 64, "nonzero": 64, "amax": 256, "tensor_scale": 1.75, '
has "$out" '"block_scaling": \{"flushed": 0, "saturated": 0, "nonzero": 64, "mean_rel_error": 0\}'
has "$out" '"per_tensor": \{"flushed": 32, "saturated": 0, "nonzero": 32, "mean_rel_error": 0.5[0-9]*\}, "nonzero_gain": 32\}$'
expect 0 "$M" underflow --from "$T/two.f32" --raw --format mxfp8-e5m2 --mx-rule floor
has "$out" '^64 gradient magnitudes from .*two.f32, in mxfp8-e5m2, rule floor: one tensor, blocks of 32 '
has "$out" '^block scaling keeps 32 more values nonzero \(50.00% of the nonzero values\); mean relative error 0 vs 0.5$'
if ! printf '%s\n' "$out" | grep -q 'loss scale'; then ok; else fail "block formats print no loss-scale table"; fi
expect 0 "$M" underflow --format nvfp4 --n 1000 --json
if printf '%s\n' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin); b, t = d["block_scaling"], d["per_tensor"]
assert d["rule"] is None and d["element"] == "e2m1" and d["block"] == 16 and d["n"] == d["nonzero"] == 1000, d
assert b["nonzero"] + b["flushed"] == t["nonzero"] + t["flushed"] == 1000 and d["nonzero_gain"] == b["nonzero"] - t["nonzero"] > 0, d
assert b["mean_rel_error"] < t["mean_rel_error"], d'; then ok; else fail "underflow --format nvfp4 --json: $out"; fi
# bad input: one line, status 2
expect 2 "$M" cast --to mxfp9 1 && one_line && has "$err" "unknown format 'mxfp9'" && has "$err" 'mxfp8-e4m3, mxfp8-e5m2, nvfp4'
expect 2 "$M" cast --to nvfp4 --mx-rule floor 1 && one_line && has "$err" '--mx-rule applies to --to mxfp8-e4m3 and mxfp8-e5m2 only'
expect 2 "$M" cast --mx-rule floor 1 && one_line
expect 2 "$M" cast --to mxfp8-e4m3 --mx-rule round 1 && one_line && has "$err" "not 'round'"
expect 2 "$M" cast --to mxfp8-e5m2 1 nan && one_line && has "$err" "finite values, not 'nan'"
expect 2 "$M" cast --to nvfp4 --saturate 1 && one_line
expect 2 "$M" underflow --format mxfp8 && one_line && has "$err" "not 'mxfp8'" && has "$err" 'nvfp4'
expect 2 "$M" underflow --format nvfp4 --mx-rule rceil && one_line && has "$err" 'mxfp8-e4m3 and mxfp8-e5m2 only'
expect 2 "$M" underflow --format fp16 --mx-rule floor && one_line
expect 2 "$M" underflow --format mxfp8-e4m3 --scales 1,256 && one_line && has "$err" '--scales does not apply'

done_
