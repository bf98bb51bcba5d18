#!/usr/bin/env bash
# test_mpi.sh - data-parallel training under OpenMPI (mpirun -np 2 mixprec ...):
# the same training as one process (within 1e-5 relative over 50 steps, and bit
# for bit where one process sums in the ranks' order: --accum 2 at half the
# micro-batch), one skip decision for all ranks, fp8-delayed's amax histories
# reduced, the bf16 and fp16 all-reduce (--allreduce) and the steps the fp16
# one loses, every precision mode with the ranks' state compared after every
# step, rank 0 alone writing, one message when a rank cannot start, a rank
# whose state differs, and a rank killed with SIGKILL.
#
# Registered by tests/CMakeLists.txt (plain build) when CMake found MPI
# (MPIRUN: its mpiexec); make test-long runs it again with MIXPREC_LONG=1,
# which adds SGD, the benchmark GPT's comparison over 50 steps and runs on 3
# and 4 ranks, and under ASan + UBSan, where OpenMPI's own allocations are
# suppressed (tests/lsan_mpi.supp), not the project's.
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
cd "$T" || exit 1
plain_fashion_mnist
# (OpenMPI's libraries have no frame pointers: LeakSanitizer unwinds with the debug information instead, or
# their leaks would show frames of unknown modules that no suppression can name)
export LSAN_OPTIONS="suppressions=$here/lsan_mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
MPIRUN=${MPIRUN:-mpirun}
LONG=${MIXPREC_LONG:-0}
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root) # CI runs as root; OpenMPI refuses it unless told
MPI=("$MPIRUN" "${root[@]}" --oversubscribe --bind-to none)
hasnt() { if printf '%s\n' "$1" | grep -qE -- "$2"; then fail "unexpected /$2/ in: $1"; else ok; fi; }
# status WANT CMD...: exit status WANT; stdout in $out, stderr in $err
status() {
    local want=$1; shift
    out=$("$@" 2>err.txt); local got=$?
    err=$(cat err.txt)
    if [ "$got" -ne "$want" ]; then fail "'$*' exited $got, expected $want (stderr: $err)"; return 1; fi
    ok
}
# mixprec's own lines on stderr (mpirun adds its banners around them): exactly one, matching $1
one_message() {
    local mine
    mine=$(printf '%s\n' "$err" | grep -E '^mixprec')
    if [ "$(printf '%s\n' "$mine" | grep -c .)" -eq 1 ] && printf '%s' "$mine" | grep -qE -- "$1"; then ok
    else fail "expected one mixprec message matching /$1/, got: $err"; fi
}
# curves A.csv B.csv TOL: the loss curves of two logs within TOL relative (0: the same bits); prints the largest
curves() {
    python3 - "$@" <<'EOF'
import csv, sys
def rows(f): return list(csv.DictReader(open(f)))
a, b, tol = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3])
assert len(a) == len(b) > 0, "%d and %d rows" % (len(a), len(b))
cols = ["step", "loss", "scale", "skipped", "grad_norm", "lr"]  # the job's figures (the counts are rank 0's share)
if tol == 0:
    bad = [(r["step"], c) for r, s in zip(a, b) for c in cols if r[c] != s[c]]
    assert not bad, "differ at (step, column) %s" % bad[:5]
    print("the same bits in %d steps" % len(a))
else:
    rel = [abs(float(r["loss"]) - float(s["loss"])) / abs(float(r["loss"])) for r, s in zip(a, b)]
    assert all(r["skipped"] == s["skipped"] for r, s in zip(a, b)), "different skipped steps"
    assert max(rel) <= tol, "loss differs by %.3g relative at step %d (tolerance %g)" % (max(rel), rel.index(max(rel)) + 1, tol)
    print("loss within %.2g relative (largest difference) over %d steps" % (max(rel), len(a)))
EOF
}
check() { # check NAME CMD...: a python check whose failure message is its output
    local name=$1; shift
    local msg
    if msg=$("$@" 2>&1); then ok; echo "  $name: $msg"; else fail "$name: $msg"; fi
}

# --version: whether MPI is built in; MPI is initialised only under mpirun, where rank 0 alone prints
status 0 "$M" --version && has "$out" 'MPI: Open MPI' && hasnt "$out" 'rank'
status 0 "${MPI[@]}" -np 2 "$M" --version && has "$out" 'rank 0 of 2' && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && ok ||
    fail "mpirun --version: expected one line from rank 0, got: $out"

# equal to one process: fp32, SGD and AdamW, 50 steps at the same global batch (64 examples, 8 sequences)
for opt in "sgd --lr 0.05" "adamw --lr 0.001"; do
    o=${opt%% *}
    [ "$LONG" = 1 ] || [ "$o" = adamw ] || continue
    MLP=(train --model mlp:784-128-10 --steps 50 --optimizer $opt --threads 1 --data "$T/fmnist")
    status 0 "$M" "${MLP[@]}" --batch 64 --log one.csv
    status 0 "${MPI[@]}" -np 2 "$M" "${MLP[@]}" --batch 64 --log two.csv --save two.ckpt
    status 0 "$M" "${MLP[@]}" --batch 32 --accum 2 --log acc.csv --save acc.ckpt
    check "mlp $o, 2 ranks against one process" curves one.csv two.csv 1e-5
    check "mlp $o, 2 ranks against one process with --accum 2" curves acc.csv two.csv 0
    if cmp -s two.ckpt acc.ckpt; then ok; else fail "mlp $o: the checkpoints of 2 ranks and of --accum 2 differ"; fi
    # the GPT: the small one bit for bit (no shuffling: one process's --accum 2 reads the ranks' windows),
    # the benchmark model (gpt:4-4-128-128) within 1e-5 of one process
    GPT=(train --model gpt:2-2-64-64 --steps 50 --optimizer $opt --threads 1 --eval-windows 8 --no-shuffle)
    status 0 "${MPI[@]}" -np 2 "$M" "${GPT[@]}" --batch 8 --log gtwo.csv --save gtwo.ckpt
    status 0 "$M" "${GPT[@]}" --batch 4 --accum 2 --log gacc.csv --save gacc.ckpt
    check "gpt $o, 2 ranks against one process with --accum 2" curves gacc.csv gtwo.csv 0
    if cmp -s gtwo.ckpt gacc.ckpt; then ok; else fail "gpt $o: the checkpoints of 2 ranks and of --accum 2 differ"; fi
    [ "$LONG" = 1 ] || continue
    GPT=(train --model gpt:4-4-128-128 --steps 50 --optimizer $opt --threads 1 --eval-windows 8)
    status 0 "$M" "${GPT[@]}" --batch 8 --log gone.csv
    status 0 "${MPI[@]}" -np 2 "$M" "${GPT[@]}" --batch 8 --log gtwo.csv
    check "gpt:4-4-128-128 $o, 2 ranks against one process" curves gone.csv gtwo.csv 1e-5
done

# one skip decision: fp16-dynamic from a scale of 2^40 backs off by skipping steps; the ranks sum their
# gradients before the unscale, so they skip together (their scaler states are compared at the end: exit 0)
FP16=(train --model mlp:784-128-10 --steps 30 --precision fp16-dynamic --init-scale 1099511627776 --threads 1 --data "$T/fmnist")
status 0 "${MPI[@]}" -np 2 "$M" "${FP16[@]}" --batch 64 --log two.csv
status 0 "$M" "${FP16[@]}" --batch 64 --log one.csv
status 0 "$M" "${FP16[@]}" --batch 32 --accum 2 --log acc.csv
check "fp16-dynamic, 2 ranks against --accum 2" curves acc.csv two.csv 0
check "fp16-dynamic skips, 2 ranks against one process" python3 - <<'EOF'
import csv
def skips(f): return [int(r["step"]) for r in csv.DictReader(open(f)) if r["skipped"] == "1"]
one, two = skips("one.csv"), skips("two.csv")
# the back-off from 2^40 (20 halvings) is the same; later a step whose summed fp16 weight gradient overflows in
# one process may not overflow in the ranks' halves (each stores its share's sum), as under DDP
assert one[:20] == two[:20] == list(range(1, 21)), (one, two)
print("steps %s skipped on the ranks, %s in one process" % (two, one))
EOF

# fp8-delayed: the ranks record the largest amax of all shares, which is one process's over the micro-batch
FP8=(train --model gpt:2-2-64-64 --steps 1 --precision fp8-delayed --threads 1 --eval-windows 8 --batch 8)
status 0 "${MPI[@]}" -np 2 "$M" "${FP8[@]}" --save two.ckpt
status 0 "$M" "${FP8[@]}" --save one.ckpt
check "fp8-delayed amax histories" python3 - <<'EOF'
import json, struct
def quant(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    t = {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k.startswith("quant.")}
    return t, {k: v for k, v in h["__metadata__"].items() if k.startswith("quant.")}
(t1, m1), (t2, m2) = quant("one.ckpt"), quant("two.ckpt")
assert len(t1) == 24 and t1 == t2 and m1 == m2, "the ranks' amax histories or scales differ from one process's"
print("%d amax histories and their scales equal to one process's" % len(t1))
EOF

# --allreduce bf16|fp16: half the bytes on the wire (each combine widens, adds in fp32 and rounds once;
# tests/test_wire.c checks the combine itself); the loss follows the fp32 all-reduce's within 1e-2 over 50 steps,
# and 3 ranks (more than one combine per value) keep the same state, compared after every step
status 2 "$M" train --allreduce fp8 --steps 1 && has "$err" "--allreduce is fp32, bf16 or fp16, not 'fp8'"
WIRE=(train --model gpt:2-2-64-64 --threads 1 --eval-windows 8 --check-every 1) # with --steps and --batch
for w in fp32 bf16 fp16; do
    status 0 "${MPI[@]}" -np 2 "$M" "${WIRE[@]}" --steps 50 --batch 8 --allreduce $w --log w_$w.csv --summary w_$w.json
    has "$out" "all-reduce $w: 120576 gradient values, 0\.[25] MB summed per step \(each rank sends 0\.[25] MB in a ring\), [0-9.]+ ms/step in MPI"
done
check "bf16 all-reduce against fp32" curves w_fp32.csv w_bf16.csv 1e-2
check "fp16 all-reduce against fp32" curves w_fp32.csv w_fp16.csv 1e-2
check "the all-reduce's summary" python3 - <<'EOF'
import json
a = {w: json.load(open("w_%s.json" % w))["allreduce"] for w in ("fp32", "bf16", "fp16")}
for w, s in a.items():
    assert s["ranks"] == 2 and s["values"] == 120576 and s["lost_steps"] == 0 and s["mpi_ms_per_step"] > 0, s
    assert s["buffer_bytes"] == (4 * 120576 if w == "fp32" else 2 * (120576 + 1)), s  # + the finiteness flag
    assert s["ring_bytes_sent"] == s["buffer_bytes"], s  # 2 (N-1)/N of it with N = 2
assert a["fp32"]["wire_underflow"] == a["bf16"]["wire_underflow"] == 0 and a["fp16"]["wire_underflow"] > 0, a
print("%d bytes summed per step (fp32), %d (bf16, fp16); %.3g%% of the values underflow in fp16 without loss scaling"
      % (a["fp32"]["buffer_bytes"], a["bf16"]["buffer_bytes"], 100 * a["fp16"]["wire_underflow"]))
EOF
for w in bf16 fp16; do
    [ "$LONG" = 1 ] || break
    status 0 "${MPI[@]}" -np 3 "$M" "${WIRE[@]}" --steps 10 --batch 12 --allreduce $w
    has "$out" "on 3 ranks \(4 each\)"
done

# the all-reduce alone (bench/dist.py's constants): it needs ranks; under mpirun, one row per format and size
status 2 "$M" bench allreduce && has "$err" 'allreduce needs ranks: mpirun -np N'
status 0 "${MPI[@]}" -np 2 "$M" bench allreduce --n 65536 --reps 1 --json
check "bench allreduce" python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(rows) == 9 * 3, len(rows)
for r in rows:
    assert r["ranks"] == 2 and r["bytes"] == (4 * r["values"] if r["wire"] == "fp32" else 2 * (r["values"] + 1)), r
    assert 0 < r["mpi_us"] <= r["us"] and r["combine_us"] >= 0, r
print("%d rows: 256 .. %d values in fp32, bf16 and fp16" % (len(rows), max(r["values"] for r in rows)))
EOF

# fp16 on the wire costs steps: a rank's gradients multiplied by a loss scale of 2^20 may be finite in fp32
# and overflow in fp16 (or their sum may): every rank skips, the scale backs off, and the summary says how
# many of the skipped steps the fp32 all-reduce would have taken
LOST=(train --model gpt:2-2-64-64 --steps 30 --threads 1 --batch 8 --eval-windows 8 --precision fp16-dynamic
      --init-scale 1048576 --check-every 1)
status 0 "${MPI[@]}" -np 2 "$M" "${LOST[@]}" --allreduce fp32 --summary l32.json
status 0 "${MPI[@]}" -np 2 "$M" "${LOST[@]}" --allreduce fp16 --summary l16.json
has "$out" "warning: [0-9]+ steps were skipped because the gradients overflowed in the fp16 all-reduce"
check "steps lost to the fp16 all-reduce" python3 - <<'EOF'
import json
a, b = json.load(open("l32.json")), json.load(open("l16.json"))
s32, s16, lost = [s["step"] for s in a["skipped"]], [s["step"] for s in b["skipped"]], b["allreduce"]["lost_steps"]
# step 1 overflows in fp32 already (on both runs: not lost); the fp16 run's other skips are the format's
assert s32[0] == s16[0] == 1 and a["allreduce"]["lost_steps"] == 0 and lost == len(s16) - 1 >= 1, (s32, s16, lost)
assert b["allreduce"]["wire_overflow"] > 0 and b["final_scale"] < a["final_scale"], b["allreduce"]
print("steps %s skipped with fp32, %s with fp16 (%d lost to it); final scale %g against %g"
      % (s32, s16, lost, b["final_scale"], a["final_scale"]))
EOF

# every precision mode, the ranks' state compared after every step; rank 0 alone writes: rank 1 runs in
# directory r1 (mpirun -wdir), with the same relative paths, and must leave it empty
mkdir r0 r1
CMP=(compare --model gpt:1-2-32-32 --steps 3 --batch 4 --threads 1 --eval-windows 4 --check-every 1)
status 0 "${MPI[@]}" -np 1 -wdir r0 "$M" "${CMP[@]}" --precisions fp32,fp16-naive,fp16,fp16-static,fp16-dynamic,bf16,bf16-pure \
    --out modes : -np 1 -wdir r1 "$M" "${CMP[@]}" --precisions fp32,fp16-naive,fp16,fp16-static,fp16-dynamic,bf16,bf16-pure --out modes
status 0 "${MPI[@]}" -np 2 "$M" "${CMP[@]}" --precisions fp8-delayed,fp8-current,mxfp8,nvfp4 --out recipes
has "$out" 'report: recipes/report.html'
status 0 "${MPI[@]}" -np 1 -wdir r0 "$M" train --steps 3 --batch 8 --threads 1 --log t.csv --summary t.json --save t.ckpt \
    : -np 1 -wdir r1 "$M" train --steps 3 --batch 8 --threads 1 --log t.csv --summary t.json --save t.ckpt
has "$out" 'on 2 ranks \(4 each\)'
[ "$(printf '%s\n' "$out" | grep -c '^train:')" -eq 1 ] && ok || fail "expected one 'train:' line (rank 0's), got: $out"
for f in r0/modes/report.html r0/modes/summary.json r0/modes/bf16-pure.csv r0/t.csv r0/t.json r0/t.ckpt; do
    [ -s "$f" ] && ok || fail "rank 0 did not write $f"
done
[ -z "$(ls -A r1)" ] && ok || fail "rank 1 wrote: $(ls -R r1)"

# a checkpoint of 2 ranks resumes in one process at the same global batch: with --accum 2 the same bits as
# the 2 ranks going on
RES=(train --model mlp:784-64-10 --threads 1 --data "$T/fmnist")
status 0 "${MPI[@]}" -np 2 "$M" "${RES[@]}" --steps 10 --batch 16 --save half.ckpt
status 0 "$M" "${RES[@]}" --steps 20 --batch 8 --accum 2 --resume half.ckpt --save resumed.ckpt
status 0 "${MPI[@]}" -np 2 "$M" "${RES[@]}" --steps 20 --batch 16 --save whole.ckpt
if cmp -s resumed.ckpt whole.ckpt; then ok; else fail "2 ranks for 10 steps then one process for 10 differ from 2 ranks for 20"; fi
# and the other way: one process's checkpoint goes on with 2 ranks as one process goes on with --accum 2 (the
# same bits), and with 4 as with --accum 4 (close: the all-reduce brackets the 4 partial sums its own way)
status 0 "$M" "${RES[@]}" --steps 10 --batch 16 --save one.ckpt
for n in 2 4; do
    [ "$LONG" = 1 ] || [ $n = 2 ] || break
    status 0 "${MPI[@]}" -np $n "$M" "${RES[@]}" --steps 20 --batch 16 --resume one.ckpt --log ranks$n.csv --save ranks$n.ckpt
    status 0 "$M" "${RES[@]}" --steps 20 --batch $((16 / n)) --accum $n --resume one.ckpt --log acc$n.csv --save acc$n.ckpt
done
if cmp -s ranks2.ckpt acc2.ckpt; then ok; else fail "one process then 2 ranks differ from one process then --accum 2"; fi
[ "$LONG" != 1 ] || check "one process, then 4 ranks against --accum 4" curves acc4.csv ranks4.csv 1e-6

# --shard-optimizer: each rank updates and holds the state of its own parameters, the gradients
# reduce-scattered (with 2 ranks the all-reduce's own additions) and the weights all-gathered from their owners:
# the same log and checkpoint as the unsharded ranks, bit for bit, for the MLP and the GPT, SGD with momentum
# and AdamW, fp32, bf16, fp16-dynamic (skipped steps) and an 8-bit state; rank 0 holds its share of the state
SH=(--threads 1 --check-every 1)
for run in "mlp:784-64-32-10 adamw fp16-dynamic" "gpt:2-2-64-64 adamw bf16" "gpt:2-2-64-64 sgd bf16+optim-state=8bit" \
           "mlp:784-64-32-10 sgd fp32 long" "gpt:2-2-64-64 adamw fp32+optim-state=8bit long"; do
    set -- $run
    [ "$LONG" = 1 ] || [ "${4:-}" != long ] || continue
    if [ "${1%%:*}" = mlp ]; then data=(--data "$T/fmnist" --batch 16); else data=(--batch 8 --eval-windows 8 --no-shuffle); fi
    if [ "$2" = sgd ]; then opt=(--optimizer sgd --momentum 0.9 --lr 0.05); else opt=(--optimizer adamw --lr 0.001); fi
    scale=(); [ "$3" = fp16-dynamic ] && scale=(--init-scale 16777216)
    R=(train --model "$1" --steps 15 --precision "$3" "${opt[@]}" "${data[@]}" "${scale[@]}" "${SH[@]}")
    status 0 "${MPI[@]}" -np 2 "$M" "${R[@]}" --log u.csv --save u.ckpt --summary u.json
    status 0 "${MPI[@]}" -np 2 "$M" "${R[@]}" --shard-optimizer --log s.csv --save s.ckpt --summary s.json &&
        has "$out" "rank 0's share: --shard-optimizer"
    check "$run: sharded against unsharded" curves u.csv s.csv 0
    if cmp -s u.ckpt s.ckpt; then ok; else fail "$run: the sharded checkpoint differs from the unsharded one"; fi
    check "$run: the state each rank holds" python3 - u.json s.json "$3" <<'EOF'
import json, sys
u, s = (json.load(open(f))["bytes_per_param_parts"] for f in sys.argv[1:3])
skips = [k["step"] for k in json.load(open(sys.argv[2]))["skipped"]]
# on parameter boundaries: the GPT's split near half; the MLP's first layer is 95% of its parameters
lo, hi = (0.25, 0.75) if json.load(open(sys.argv[2]))["model"].startswith("gpt") else (0.5, 0.99)
assert lo * u["optimizer_state"] < s["optimizer_state"] < hi * u["optimizer_state"], (u, s)
assert sys.argv[3] != "fp16-dynamic" or 3 <= len(skips) <= 12, skips
print("optimizer state %.2f bytes per parameter on rank 0, %.2f unsharded; %d skipped steps" % (s["optimizer_state"], u["optimizer_state"], len(skips)))
EOF
done
# a sharded checkpoint goes on sharded as the run that did not stop, and in one process (the same file as unsharded)
R=(train --model gpt:2-2-64-64 --batch 8 --eval-windows 8 --no-shuffle --precision bf16 "${SH[@]}")
status 0 "${MPI[@]}" -np 2 "$M" "${R[@]}" --steps 10 --shard-optimizer --save sh10.ckpt
status 0 "${MPI[@]}" -np 2 "$M" "${R[@]}" --steps 20 --shard-optimizer --resume sh10.ckpt --save shr.ckpt
status 0 "${MPI[@]}" -np 2 "$M" "${R[@]}" --steps 20 --shard-optimizer --save sh20.ckpt
if cmp -s shr.ckpt sh20.ckpt; then ok; else fail "sharded: 10 steps then 10 more differ from 20 steps"; fi
R1=(train --model gpt:2-2-64-64 --batch 4 --accum 2 --eval-windows 8 --no-shuffle --precision bf16 --threads 1)
status 0 "$M" "${R1[@]}" --steps 20 --resume sh10.ckpt --save one20.ckpt
if cmp -s one20.ckpt sh20.ckpt; then ok; else fail "a sharded checkpoint resumed in one process (--accum 2) differs"; fi
# a checkpoint before any step was taken (both skipped): no rank holds state, nor does the file
R0=(train --model gpt:2-2-64-64 --batch 8 --eval-windows 8 --precision fp16-dynamic --init-scale 1e38 --steps 2 "${SH[@]}")
status 0 "${MPI[@]}" -np 2 "$M" "${R0[@]}" --shard-optimizer --save sk.ckpt
status 0 "${MPI[@]}" -np 2 "$M" "${R0[@]}" --save uk.ckpt
if cmp -s sk.ckpt uk.ckpt; then ok; else fail "sharded, every step skipped: the checkpoint differs from the unsharded one"; fi
# 3 ranks add each sum in rank order, as one process accumulates 3 micro-batches
R3=(train --model gpt:2-2-64-64 --eval-windows 8 --no-shuffle --precision bf16 --steps 6 --threads 1)
status 0 "${MPI[@]}" -np 3 "$M" "${R3[@]}" --batch 12 --check-every 1 --shard-optimizer --save sh3.ckpt --log sh3.csv
status 0 "$M" "${R3[@]}" --batch 4 --accum 3 --save one3.ckpt --log one3.csv
check "3 sharded ranks against one process with --accum 3" curves one3.csv sh3.csv 0
if cmp -s one3.ckpt sh3.ckpt; then ok; else fail "3 sharded ranks differ from one process with --accum 3"; fi
status 2 "$M" train --steps 1 --shard-optimizer && has "$err" '--shard-optimizer .* needs mpirun -np N with N >= 2'
status 2 "${MPI[@]}" -np 2 "$M" train --steps 1 --batch 8 --shard-optimizer --allreduce bf16 &&
    one_message '--shard-optimizer reduce-scatters the gradients in fp32: no --allreduce bf16'

# no start: the ranks cannot share a micro-batch of 7, were given different options, or one cannot read its data
status 2 "${MPI[@]}" -np 2 "$M" train --batch 7 --steps 1 && one_message '--batch 7 does not split into 2 equal shares'
status 2 "${MPI[@]}" -np 2 "$M" train --model gpt:1-2-16-16 --batch 4 --steps 1 --precision bf16 --probe nvfp4 &&
    one_message '--probe measures one process.s GEMMs: run it without mpirun'
status 2 "${MPI[@]}" -np 1 "$M" train --batch 8 --steps 1 : -np 1 "$M" train --batch 16 --steps 1 &&
    one_message 'different options'
status 1 env MIXPREC_FAULT_DIST_READ=1 "${MPI[@]}" -np 2 "$M" train --batch 8 --steps 1 &&
    one_message 'rank 1: .*mixprec-fault-injected.*cannot open' && hasnt "$out" '^train:'

# a rank whose weights differ (MIXPREC_FAULT_DIST_DIVERGE, tools/dist.h) stops the run at the next comparison
status 1 env MIXPREC_FAULT_DIST_DIVERGE=1:7 "${MPI[@]}" -np 2 "$M" train --model mlp:784-64-10 --batch 8 --steps 20 \
    --threads 1 --check-every 5 --save div.ckpt && one_message "step 10: the ranks' weights, optimizer and scaler state differ"
[ ! -e div.ckpt ] && ok || fail "a run whose ranks differ wrote its checkpoint"

# kill -9 of rank 1 during training (once the log streaming into k.csv.partial.PID, rank 0's, has rows): mpirun ends the
# job with an error within 60 s, no rank is left, the checkpoint on disk is the one before and resumes, and
# the log is as docs/LOGS.md says: k.csv never written, the rows so far whole in k.csv.partial.PID
KILL=(train --model mlp:784-256-256-10 --batch 64 --threads 1 --data "$T/fmnist")
status 0 "$M" "${KILL[@]}" --steps 3 --save k.ckpt && cp k.ckpt k0.ckpt
"${MPI[@]}" -np 2 "$M" "${KILL[@]}" --steps 1000000 --resume k.ckpt --save k.ckpt --log k.csv >/dev/null 2>k.err &
job=$!
children() { for s in /proc/[0-9]*/stat; do awk -v p="$1" '$4 == p { print $1 }' "$s" 2>/dev/null; done; }
kpart() { compgen -G 'k.csv.partial.*' | head -1; }
for _ in $(seq 300); do [ -n "$(kpart)" ] && [ "$(wc -l <"$(kpart)")" -gt 3 ] && break; sleep 0.1; done
victim=
ranks=$(children "$job")
for p in $ranks; do tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p; done
if [ -n "$victim" ]; then
    kill -9 "$victim"
    for _ in $(seq 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then
        fail "mpirun still runs 60 s after rank 1 was killed"
        for p in $ranks; do kill -9 "$p" 2>/dev/null; done
        kill -9 "$job"
    else
        ok
    fi
    wait "$job"; rc=$?
    [ "$rc" -ne 0 ] && ok || fail "mpirun exited 0 after rank 1 was killed"
    alive() { # the ranks still running (a zombie has ended)
        for p in $ranks; do [ -r "/proc/$p/stat" ] && [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] && echo "$p"; done
    }
    for _ in $(seq 100); do [ -z "$(alive)" ] && break; sleep 0.1; done # mpirun may return before they are gone
    left=$(alive)
    [ -z "$left" ] && ok || fail "ranks left running: $left"
    if cmp -s k.ckpt k0.ckpt; then ok; else fail "the checkpoint changed"; fi
    # (the last byte a newline: $(...) drops it, leaving nothing)
    if [ ! -e k.csv ] && [ "$(wc -l <"$(kpart)")" -gt 3 ] && [ -z "$(tail -c 1 "$(kpart)")" ]; then ok
    else fail "after the kill: k.csv $([ -e k.csv ] && echo exists || echo absent), k.csv.partial.* not whole rows"; fi
    status 0 "${MPI[@]}" -np 2 "$M" "${KILL[@]}" --steps 5 --resume k.ckpt && has "$out" '5 steps .*\(resumed\)' &&
        has "$out" '^ +2 steps, 0 skipped'
else
    fail "rank 1 of the job (mpirun $job: children $ranks) not found"
    kill -9 "$job"; wait "$job"
fi

done_
