#!/usr/bin/env bash
# check_layers.sh [MIXPREC] [OUT] - which Linear layers of the GPT can take
# a recipe (docs/TRAINING.md, "Which layers can take a recipe"): `mixprec
# advise` for each recipe of RECIPES (fp8-delayed fp8-current mxfp8 nvfp4)
# at check_gpt.sh's accuracy budget (budget.sh), the NVFP4 paper's rule
# beside it (nvfp4 with the last block in bf16; lm_head, the tied embedding,
# is bf16 in every mode) with the same two seeds, then the table of
# docs/TRAINING.md into OUT/table.md: per recipe the whole model and the
# advised assignment, layers kept, validation loss per seed and its
# difference from bf16, bytes per parameter, step time (each row's assignment
# trained alone for TIME_STEPS steps after the advise runs, the median of
# TIME_ROUNDS rounds), and the rank
# correlation of the probe's scores with the losses. `make check-layers`
# runs it for the docs: 2 x (16 + 3) runs of 1000 steps per recipe, the
# recipes JOBS (the CPU count) at a time with one thread each on 2 cores
# (THREADS: the threads of each advise and rule run, else CPUs / JOBS).
# LAYERS_KEEP=1: a recipe whose OUT/RECIPE.json is there, and a rule run
# whose summary is, are not run again (the table is made from their files), so
# that the table can be filled a few recipes at a time (RECIPES).
# LAYERS_QUICK=1 (`make check-layers-quick`, which CI runs): nvfp4 alone on
# the demo's GPT (gpt:2-4-64-64, 400 steps; 2 x (8 + 3) + 2 runs).
# Asserted on what advise wrote (--summary): every run has a finite loss;
# every layer was probed in all three directions (scores in (0, 1)); the
# proposal keeps the layers of the largest scores, as few as the rule asks
# (the whole recipe's cost shared in proportion to the squared scores, within
# the budget, BUDGET: 1%); the advised file names layers of the model.
set -euo pipefail
M=${1:-build/mixprec}
out=${2:-mixprec-layers}
. "$(dirname "$0")/budget.sh"
recipes=${RECIPES:-fp8-delayed fp8-current mxfp8 nvfp4}
blocks=4
if [ -n "${LAYERS_QUICK:-}" ]; then
    recipes=nvfp4 blocks=2
    budget=(--model gpt:2-4-64-64 --batch 16 --steps 400 --lr 6e-3 --lr-schedule cosine --warmup 20
            --weight-decay 0.1 --betas 0.9,0.95 --clip 1 --seed 1)
fi
mkdir -p "$out"
# the recipes' advise JOBS at a time (the CPU count, at most one per recipe), each with CPUs / JOBS threads
cpus=$(nproc 2> /dev/null || echo 1)
set -- $recipes
jobs=${JOBS:-$cpus}
[ "$jobs" -le $# ] || jobs=$#
[ "$jobs" -ge 1 ] || jobs=1
threads=${THREADS:-$((cpus / jobs > 0 ? cpus / jobs : 1))}
advise() { # RECIPE
    if [ -n "${LAYERS_KEEP:-}" ] && [ -s "$out/$1.json" ]; then
        echo "check_layers: $out/$1.json kept (LAYERS_KEEP)"
        return 0
    fi
    echo "check_layers: mixprec advise --recipe $1 --budget ${BUDGET:-1} --threads $threads ${budget[*]}"
    if ! "$M" advise --recipe "$1" --budget "${BUDGET:-1}" --layers-out "$out/$1.layers" --summary "$out/$1.json" \
        --threads "$threads" "${budget[@]}" > "$out/$1.txt"; then
        echo "check_layers: advise --recipe $1 failed ($out/$1.txt)" >&2
        return 1
    fi
    tail -n 6 "$out/$1.txt"
}
each_at_once "$jobs" advise $recipes || exit 1
rule="nvfp4+bf16=transformer.h.$((blocks - 1)).*"
if [[ " $recipes " == *" nvfp4 "* ]]; then
    for seed in 1 2; do
        args=("${budget[@]}")
        args[${#args[@]}-1]=$seed
        [ -n "${LAYERS_KEEP:-}" ] && [ -s "$out/rule-s$seed/summary.json" ] && continue
        "$M" compare --precisions "$rule" --threads "$threads" --out "$out/rule-s$seed" "${args[@]}" \
            > "$out/rule-s$seed.txt"
    done
fi
# Each row's step time from its assignment trained alone (the runs above share the cores): TIME_STEPS (100)
# steps with the budget's other options and THREADS, one run after another, the summary's median step, in
# TIME_ROUNDS (3) rounds over the rows; the table takes the median round. Kept under LAYERS_KEEP as the
# runs are.
targs=("${budget[@]}")
for i in "${!targs[@]}"; do [ "${targs[$i]}" != --steps ] || targs[i+1]=${TIME_STEPS:-100}; done
time_row() { # TAG PRECISION [LAYER FILE]
    [ -n "${LAYERS_KEEP:-}" ] && [ -s "$out/time-$1-$round.json" ] && return 0
    if ! "$M" train "${targs[@]}" --threads "$threads" --precision "$2" ${3:+--layer-precision "$3"} \
        --summary "$out/time-$1-$round.json" > "$out/time-$1-$round.txt"; then
        echo "check_layers: the timing run of $1 failed ($out/time-$1-$round.txt)" >&2
        return 1
    fi
}
rounds=${TIME_ROUNDS:-3}
for round in $(seq "$rounds"); do
    time_row bf16 bf16
    for rec in $recipes; do
        time_row "$rec" "$rec"
        time_row "$rec-advised" "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["precision"])' \
            "$out/$rec.json")" "$out/$rec.layers"
    done
    [[ " $recipes " != *" nvfp4 "* ]] || time_row rule "$rule"
done
python3 - "$out" "$rule" "$rounds" $recipes <<'PY'
import json, math, os, sys
out, rule, rounds, recipes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def ms(tag): # the median round
    t = sorted(json.load(open(f"{out}/time-{tag}-{r}.json"))["ms_per_step"] for r in range(1, rounds + 1))
    return t[len(t) // 2]
bad = []
rows = ["| assignment | layers in the recipe | val loss seed 1 | seed 2 | vs bf16 (mean, +- half the difference) "
        "| bytes/param | ms/step |", "|---|---|---|---|---|---|---|"]
def row(name, layers, r, bf16, tag):
    v, b = r["val_loss"], bf16["val_loss"]
    if any(x is None or not math.isfinite(x) for x in v):
        bad.append(f"{name}: a run's validation loss is not finite: {v}")
        return
    d = [100 * (v[k] - b[k]) / b[k] for k in (0, 1)]
    rows.append(f"| {name} | {layers} | {v[0]:.4f} | {v[1]:.4f} | {(d[0] + d[1]) / 2:+.2f}% +- {abs(d[0] - d[1]) / 2:.2f}% "
                f"| {r['bytes_per_param']:.2f} | {ms(tag):.0f} |")
corr = []
for i, rec in enumerate(recipes):
    j = json.load(open(f"{out}/{rec}.json"))
    n, layers = len(j["layers"]), j["layers"]
    if i == 0:
        row("bf16", "0", j["bf16"], j["bf16"], "bf16")
    row(f"{rec}, whole", f"{n}/{n}", j["whole"], j["bf16"], rec)
    for x in layers:
        if not all(e is not None and 0 < e < 1 for e in x["probe_error"]):
            bad.append(f"{rec}: {x['name']} was not probed in every direction: {x['probe_error']}")
    if any(x["score"] is None for x in layers) or j["whole"]["vs_bf16"] is None:
        bad.append(f"{rec}: a score or the whole recipe's cost is not finite")
        continue
    total = sum(x["score"] ** 2 for x in layers) or 1.0
    order = sorted(range(n), key=lambda k: -layers[k]["score"])
    whole = j["whole"]["vs_bf16"]
    want = next(k for k in range(n + 1)
                if k == n or whole * sum(layers[o]["score"] ** 2 for o in order[k:]) / total <= j["budget"])
    kept = sorted(x["name"] for x in layers if x["kept_in_bf16"])
    if kept != sorted(layers[o]["name"] for o in order[:want]):
        bad.append(f"{rec}: kept {kept}, the rule keeps {sorted(layers[o]['name'] for o in order[:want])}")
    names = [x["name"] for x in layers]
    for line in j["layer_precision"].splitlines()[1:]:
        pat = line.split(" = ")[0]
        if not any(pat == nm or (pat.startswith("transformer.h.") and pat.split(".", 3)[3] == nm.split(".", 3)[3])
                   for nm in names):
            bad.append(f"{rec}: the advised file names {pat}, no layer of the model")
    row(f"{rec}, advised ({j['precision']} + {out}/{rec}.layers)", f"{n - j['kept']}/{n}", j["advised"], j["bf16"],
        f"{rec}-advised")
    corr.append(f"{rec}: {j['spearman']:+.2f}" if j["spearman"] is not None else f"{rec}: -")
    if rec == "nvfp4":
        runs = [json.load(open(f"{out}/rule-s{s}/summary.json"))["runs"][0] for s in (1, 2)]
        r = {"val_loss": [x["val_loss"] for x in runs], "bytes_per_param": runs[0]["bytes_per_param"]}
        row(f"nvfp4, the paper's rule ({rule})", f"{n - 4}/{n}", r, j["bf16"], "rule")
table = "\n".join(rows) + "\n\nrank correlation of the probe's scores with each layer's loss alone (Spearman): " + \
    ", ".join(corr) + "\n"
open(f"{out}/table.md", "w").write(table)
print(table)
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
echo "check-layers: done (table: $out/table.md)"
