#!/usr/bin/env bash
# test_modes.sh - the precision switches of mixprec train and compare: --master-weights none|kahan|sr,
# --optim-state and --reductions: each setting trains, is recorded in the summary and the checkpoint, resumes
# bit-identically, refuses a checkpoint of another setting, and bad combinations are usage errors.
# (Apart from tests/test_cli.sh so that the two run side by side.)
. "$(dirname "$0")/lib.sh"

plain_fashion_mnist
for i in $(seq 1 40); do echo "The cat sat on the mat, and the dog sat on the log number $i."; done > "$T/c.txt"
TR=(train --model mlp:784-48-10 --batch 64 --threads 2 --data "$T/fmnist")
GT=(train --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --threads 2 --lr 3e-3)
expect 0 "$M" "${TR[@]}" --precision fp16-dynamic --steps 17 --save "$T/b.st" # an fp32-master checkpoint

# --master-weights none: weights and the optimizer's state only in fp16; trains, resumes
# bit-identically, a checkpoint of the other setting is refused, bad combinations are usage errors
# (with SGD and momentum: AdamW's run ends in NaN, below, and --save never writes such a state over a checkpoint)
MW=(--optimizer sgd --momentum 0.9 --lr 0.05)
expect 0 "$M" "${TR[@]}" "${MW[@]}" --precision fp16-dynamic --master-weights none --steps 12 --save "$T/mw.st" --summary "$T/mw.json"
has "$out" '^result: test accuracy [0-9.]+%'
if python3 - "$T/mw.st" "$T/mw.json" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["__metadata__"]["master_weights"] == "none", h["__metadata__"]
st = {k: v["dtype"] for k, v in h.items() if k.startswith("optim.")}
assert st and all(d == "F16" for d in st.values()), st
assert json.load(open(sys.argv[2]))["master_weights"] == "none"
assert json.load(open(sys.argv[2]))["precision"] == "fp16-dynamic+master-weights=none"
PY
then ok; else fail "master-weights none checkpoint"; fi
# (AdamW there ends in NaN: exp_avg_sq of small gradients rounds to 0 in fp16 and the update is exp_avg / eps;
# SGD with momentum learns)
expect 0 "$M" "${TR[@]}" --precision fp16-dynamic --master-weights none --optimizer sgd --momentum 0.9 --lr 0.05 --steps 30 --log "$T/mwsgd.csv"
if python3 - "$T/mwsgd.csv" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
l = [float(r["loss"]) for r in rows]
assert all(math.isfinite(x) for x in l) and sum(l[-5:]) < 0.7 * sum(l[:5]), l
PY
then ok; else fail "master-weights none with SGD learns"; fi
expect 0 "$M" "${TR[@]}" "${MW[@]}" --precision fp16-dynamic --master-weights none --steps 5 --save "$T/mw5.st"
expect 0 "$M" "${TR[@]}" "${MW[@]}" --precision fp16-dynamic+master-weights=none --steps 12 --resume "$T/mw5.st" --save "$T/mw12.st"
if cmp -s "$T/mw.st" "$T/mw12.st"; then ok; else fail "master-weights none resume differs from an uninterrupted run"; fi
expect 1 "$M" "${TR[@]}" "${MW[@]}" --precision fp16-dynamic --steps 12 --resume "$T/mw5.st" && one_line && has "$err" "master_weights 'none'"
expect 1 "$M" "${TR[@]}" --precision fp16-dynamic --master-weights none --steps 30 --resume "$T/b.st" && one_line && has "$err" "master_weights 'fp32'"
expect 2 "$M" "${TR[@]}" --precision bf16-pure --master-weights none --steps 1 && one_line && has "$err" 'bf16-pure'
expect 2 "$M" "${TR[@]}" --precision fp32 --master-weights none --steps 1 && one_line && has "$err" 'fp16 or bf16'
expect 2 "$M" "${TR[@]}" --master-weights half --steps 1 && one_line
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic --master-weights none --steps 8 --save "$T/gmw.st"
has "$out" '^result: validation loss [0-9.]+'
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic --master-weights none --steps 3 --save "$T/gmw3.st"
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic --master-weights none --steps 8 --resume "$T/gmw3.st" --save "$T/gmw8.st"
if cmp -s "$T/gmw.st" "$T/gmw8.st"; then ok; else fail "gpt master-weights none resume differs"; fi
expect 0 "$M" compare --precisions fp16-dynamic,fp16-dynamic+master-weights=none --out "$T/cmw" --model mlp:784-48-10 --batch 64 --steps 3
has "$out" 'fp16-dynamic\+master-weights=none'
if [ -s "$T/cmw/fp16-dynamic+master-weights=none.json" ] && [ -s "$T/cmw/fp16-dynamic.json" ]; then ok; else fail "compare with a switch"; fi

# --optim-state and --master-weights kahan|sr: each setting trains, and resumes bit-identically (the state as it is
# held: codes and scales, the Kahan compensation); resuming under another setting is refused; the label is canonical
for pm in G:bf16+optim-state=8bit T:bf16+optim-state=8bit G:bf16+optim-state=4bit T:bf16+optim-state=fp8 \
          G:bf16+optim-state=bf16 G:bf16+master-weights=kahan T:fp16-dynamic+master-weights=kahan+optim-state=8bit \
          T:bf16+master-weights=sr+optim-state=4bit; do
    mdl=${pm%%:*} pm=${pm#*:}
    {
        if [ $mdl = G ]; then R=("${GT[@]}"); else R=("${TR[@]}"); fi
        expect 0 "$M" "${R[@]}" --precision "$pm" --steps 6 --save "$T/os6.st" --summary "$T/os.json"
        expect 0 "$M" "${R[@]}" --precision "$pm" --steps 3 --save "$T/os3.st"
        expect 0 "$M" "${R[@]}" --precision "$pm" --steps 6 --resume "$T/os3.st" --save "$T/os6r.st"
        cmp -s "$T/os6.st" "$T/os6r.st" && ok || fail "$pm ($mdl): resume differs from an uninterrupted run"
    }
done
python3 - "$T/os.json" "$T/os6.st" <<'PY' && ok || fail "the 4-bit state in the summary and the checkpoint"
import json, struct, sys
j = json.load(open(sys.argv[1]))
assert j["precision"] == "bf16-pure+optim-state=4bit" and j["optim_state"] == "4bit" and j["master_weights"] == "sr", j
b = j["bytes_per_param_parts"]  # mlp:784-48-10: fc0's state in 4 bits (2 x (0.5 + 4/128)), the rest's in bf16
n0, n = 784 * 48, 784 * 48 + 48 + 48 * 10 + 10
assert b["weights"] == 2 and b["copies"] == 0 and b["gradients"] == 4 and b["compensation"] == 0, b
assert abs(b["optimizer_state"] - (n0 * 2 * (0.5 + 4 / 128) + (n - n0) * 4) / n) < 1e-9, b
assert abs(j["bytes_per_param"] - sum(b.values())) < 1e-9, j["bytes_per_param"]
b = open(sys.argv[2], "rb").read(); h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["__metadata__"]["optim_state"] == "4bit"
assert h["optim.fc0.weight.state1"]["dtype"] == "U8" and h["optim.fc0.weight.state1"]["shape"] == [784 * 48 // 2]
assert h["optim.fc0.weight.state2.scale"]["shape"] == [784 * 48 // 128]
assert h["optim.fc1.weight.state1"]["dtype"] == "BF16"  # 480 values: under 4096, kept in the compute format
PY
expect 1 "$M" "${TR[@]}" --precision bf16-pure --steps 6 --resume "$T/os3.st" && one_line && has "$err" "optim_state '4bit', this run asks for 'fp32'"
expect 0 "$M" "${TR[@]}" --precision bf16+master-weights=sr+optim-state=fp32 --steps 1 && has "$out" '^train: .*, bf16-pure, '
expect 0 "$M" "${TR[@]}" --precision bf16 --optim-state bf16 --master-weights none --steps 1 && has "$out" '^train: .*, bf16\+master-weights=none, '
expect 2 "$M" "${TR[@]}" --precision fp32+master-weights=kahan --steps 1 && one_line && has "$err" 'kahan needs fp16 or bf16 compute'
expect 2 "$M" "${TR[@]}" --precision fp16-dynamic --master-weights sr --steps 1 && one_line && has "$err" 'sr rounds updates stochastically into bf16'
expect 2 "$M" "${TR[@]}" --precision fp8-delayed+master-weights=kahan --steps 1 && one_line && has "$err" 'its recipe quantizes'
expect 2 "$M" "${TR[@]}" --optimizer sgd --optim-state 8bit --steps 1 && one_line && has "$err" 'SGD without --momentum keeps no optimizer state'
expect 2 "$M" "${TR[@]}" --precision bf16+optim-state=2bit --steps 1 && one_line && has "$err" "unknown switch '\+optim-state=2bit'"

# --reductions half (and fp16-naive, its preset): recorded, differs from fp32 reductions, refused where it cannot apply
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic --reductions half --steps 4 --summary "$T/rh.json" --log "$T/rh.csv"
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic+reductions=half --steps 4 --summary "$T/rh2.json" --log "$T/rh2.csv"
expect 0 "$M" "${GT[@]}" --precision fp16-dynamic --steps 4 --summary "$T/rf.json" --log "$T/rf.csv"
if python3 - "$T/rh.json" "$T/rh2.json" "$T/rf.json" "$T/rh.csv" "$T/rh2.csv" "$T/rf.csv" <<'PY'
import csv, json, sys
h, h2, f = (json.load(open(p)) for p in sys.argv[1:4])
assert h["precision"] == h2["precision"] == "fp16-dynamic+reductions=half", h["precision"]
assert h["reductions"] == "half" and f["reductions"] == "fp32" and f["precision"] == "fp16-dynamic"
lh, lh2, lf = ([r["loss"] for r in csv.DictReader(open(p))] for p in sys.argv[4:7])
assert lh == lh2 and lh != lf, (lh, lf)
PY
then ok; else fail "--reductions half"; fi
expect 0 "$M" "${GT[@]}" --precision fp16-naive --steps 3 --summary "$T/naive.json"
if python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["reductions"] == "half" and j["master_weights"] == "none" and j["precision"] == "fp16-naive", j' "$T/naive.json"
then ok; else fail "fp16-naive preset"; fi
expect 0 "$M" "${TR[@]}" --precision bf16 --reductions half --steps 3 --save "$T/rh3.st"
expect 1 "$M" "${TR[@]}" --precision bf16 --steps 6 --resume "$T/rh3.st" && one_line && has "$err" "reductions 'half'"
expect 0 "$M" "${TR[@]}" --precision bf16+reductions=half --steps 6 --resume "$T/rh3.st"
done_
