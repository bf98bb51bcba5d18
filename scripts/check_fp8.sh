#!/usr/bin/env bash
# check_fp8.sh [MIXPREC] [OUT] - the fp8/fp4 recipes on the GPT at the accuracy
# budget of check_gpt.sh (docs/TRAINING.md, "fp8 and fp4 recipes"): bf16 and
# the four recipes trained side by side, each in a comparison of its own,
# OUT/MODE (budget.sh's budget_train), then the targets, asserted on what the
# runs wrote: fp8-delayed, fp8-current and mxfp8 end within 3% of bf16's
# validation loss; nvfp4 is reported as it comes out, with the share of its
# quantized values saturated and flushed.
# CHECK_FROM=DIR asserts them on runs already made (`make check-budget`
# trains these modes in check_gpt.sh's run, bf16 once for both), after
# checking that each was made with this budget and nothing else that changes
# training.
# `make check-fp8` runs it; `.ci/run` runs it through `make check` (`make
# check-budget`) after `make test`.
set -euo pipefail
M=${1:-build/mixprec}
out=${CHECK_FROM:-${2:-mixprec-fp8}}
. "$(dirname "$0")/budget.sh"
modes=(bf16 fp8-delayed fp8-current mxfp8 nvfp4)
trained=0
[ -n "${CHECK_FROM:-}" ] || budget_train "$M" "$out" "${modes[@]}" || trained=1 # said; what ran is still shown
echo
python3 - "$out" "${budget[*]}" "${modes[@]}" <<'PY'
import json, os, sys
out, budget, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
def same_budget(words, want):
    """compare, the budget's options in order, and only options that do not change training"""
    at = next((i for i in range(len(words)) if words[i:i + len(want)] == want), None)
    if at is None or words[1:2] != ["compare"]:
        return False
    rest, i = words[2:at] + words[at + len(want):], 0
    while i < len(rest):
        if rest[i] in ("--precisions", "--out", "--threads") and i + 1 < len(rest):
            i += 2
        elif rest[i] == "--checkpoints":
            i += 1
        else:
            return False
    return True
runs, bad = {}, 0
for mode in modes:
    if not os.path.exists(f"{out}/{mode}/summary.json"):
        continue
    summary = json.load(open(f"{out}/{mode}/summary.json"))
    if not same_budget(summary["command"].split(), budget.split()):
        print(f"FAIL: {out}/{mode}/summary.json was not made with the budget's options alone ({budget}): "
              f"{summary['command']}")
        bad = 1
    runs.update({r["precision"]: r for r in summary["runs"]})
if "bf16" not in runs:
    print("FAIL: bf16 was not run")
    sys.exit(1)
base = runs["bf16"]["val_loss"]
print("mode           val loss  vs bf16   saturated  flushed   ms/step")
for mode, limit in (("bf16", None), ("fp8-delayed", 3.0), ("fp8-current", 3.0), ("mxfp8", 3.0), ("nvfp4", None)):
    if mode not in runs:
        print(f"FAIL: {mode} was not run")
        bad = 1
        continue
    r = runs[mode]
    v, rel = r["val_loss"], 100 * (r["val_loss"] - runs["bf16"]["val_loss"]) / base
    sat = r.get("quant_saturated_fraction")
    fl = r.get("quant_flushed_fraction")
    q = f"{100 * sat:8.4f}%  {100 * fl:7.4f}%" if sat is not None else f"{'-':>9}  {'-':>8}"
    print(f"{mode:14s} {v:8.4f}  {rel:+6.2f}%  {q}  {r['ms_per_step']:7.1f}")
    if limit is not None and abs(rel) > limit:
        print(f"FAIL: {mode}: validation loss {v:.4f} differs by {rel:+.2f}% from bf16's {base:.4f} (at most {limit}%)")
        bad = 1
sys.exit(bad)
PY
[ "$trained" = 0 ] || { echo "check-fp8: FAILED (a mode did not train)"; exit 1; }
echo "check-fp8: the targets hold (reports: $out/MODE/report.html)"
