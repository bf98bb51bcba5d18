#!/usr/bin/env bash
# check_stability.sh [MIXPREC] [OUT] - the lean ways of holding a model against
# plain bf16 on short runs where a blow-up shows (docs/TRAINING.md, "Second
# moments stored as zero"): gpt:2-2-64-64 on Debian's common-licenses texts
# (the regular files of /usr/share/common-licenses, concatenated in sorted
# order: 237,320 bytes, sha256 e702fc128a22ec5f...; another file set is an
# error), seeds 1-5, lr 3e-3 and 6e-3, 150 steps, batch 8, one `mixprec
# compare` per seed and rate (two at a time, one thread each) of bf16, bf16
# with bf16, fp8, 8-bit and 4-bit optimizer state, with Kahan-compensated and
# stochastically rounded weights, and Kahan or stochastic rounding with 8-bit
# and 4-bit state; bf16 weights without a master copy are reported only.
# Asserted for each setting: on every seed and rate its largest loss after
# step 10 is at most bf16's there plus 1.0, and its mean over the seeds of the
# last 30 steps' loss within 3% of bf16's at each rate. `make
# check-stability` runs it (not yet part of `make check`: docs/TRAINING.md
# says which settings are outside the bounds).
set -euo pipefail
M=${1:-build/mixprec}
out=${2:-mixprec-stability}
mkdir -p "$out"
corpus="$out/common-licenses.txt"
: > "$corpus"
for f in $(ls /usr/share/common-licenses | LC_ALL=C sort); do
    p=/usr/share/common-licenses/$f
    if [ -f "$p" ] && [ ! -L "$p" ]; then cat "$p" >> "$corpus"; fi
done
sum=$(sha256sum "$corpus" | cut -c1-16)
if [ "$sum" != e702fc128a22ec5f ]; then
    echo "check_stability.sh: /usr/share/common-licenses gives a corpus with sha256 $sum..., not e702fc128a22ec5f...:" \
         "another base-files version; the thresholds were set on that corpus" >&2
    exit 1
fi
modes=bf16,bf16+optim-state=bf16,bf16+optim-state=fp8,bf16+optim-state=8bit,bf16+optim-state=4bit
modes+=,bf16+master-weights=kahan,bf16-pure,bf16+master-weights=kahan+optim-state=8bit
modes+=,bf16+master-weights=kahan+optim-state=4bit,bf16-pure+optim-state=8bit,bf16-pure+optim-state=4bit
modes+=,bf16+master-weights=none
run() { # SEED LR
    "$M" compare --model gpt:2-2-64-64 --data "text:$corpus" --precisions "$modes" --steps 150 --batch 8 \
        --lr "$2" --seed "$1" --threads 1 --eval-every 150 --out "$out/s$1-lr$2" > "$out/s$1-lr$2.txt" 2>&1 ||
        { echo "check_stability.sh: seed $1, lr $2 failed: $(tail -2 "$out/s$1-lr$2.txt")" >&2; return 1; }
}
pids=()
for lr in 3e-3 6e-3; do
    for seed in 1 2 3 4 5; do
        run "$seed" "$lr" & pids+=($!)
        if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    done
done
for p in "${pids[@]}"; do wait "$p"; done
python3 - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
seeds, lrs = [1, 2, 3, 4, 5], ["3e-3", "6e-3"]
loss = {}  # (mode, seed, lr) -> the losses of steps 1..150
modes = []
for lr in lrs:
    for seed in seeds:
        d = f"{out}/s{seed}-lr{lr}"
        for r in json.load(open(d + "/summary.json"))["runs"]:
            m = r["precision"]
            if m not in modes:
                modes.append(m)
            loss[m, seed, lr] = [float(x["loss"]) for x in csv.DictReader(open(f"{d}/{m}.csv"))]
reported = {"bf16+master-weights=none"}
fails = 0
print(f"{'setting':<44} {'lr':>5} {'worst peak - bf16':>18} {'last-30 mean':>13} {'vs bf16':>8}")
for lr in lrs:
    ref_mean = sum(sum(loss["bf16", s, lr][-30:]) / 30 for s in seeds) / len(seeds)
    for m in modes:
        peaks = [max(loss[m, s, lr][10:]) - max(loss["bf16", s, lr][10:]) for s in seeds]
        mean = sum(sum(loss[m, s, lr][-30:]) / 30 for s in seeds) / len(seeds)
        rel = mean / ref_mean - 1
        bad = m not in reported and (max(peaks) > 1.0 or abs(rel) > 0.03)
        fails += bad
        print(f"{m:<44} {lr:>5} {max(peaks):>18.3f} {mean:>13.4f} {100 * rel:>+7.2f}%"
              + ("  FAIL" if bad else "  (reported only)" if m in reported else ""))
print(f"{'stability sweep':<30} {'failed' if fails else 'passed'}: {fails} settings outside the bounds")
sys.exit(1 if fails else 0)
PY
