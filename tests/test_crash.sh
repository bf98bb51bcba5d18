#!/usr/bin/env bash
# test_crash.sh - crash safety and disk errors: a checkpoint write killed at any
# point leaves the old checkpoint or the new one, whole, and --resume works from
# it; a full disk ends the run with one line per file it could not write and
# exit status 1, the previous checkpoint, summary and report intact, the CSV log
# holding complete rows, and a summary that fails costing no checkpoint.
#
# Kills: the writer's test-only fault hook (MIXPREC_FAULT_WRITE_KILL_AFTER=N,
# src/io.c) at 26 points spread over the checkpoint's bytes, and real SIGKILLs
# from outside at random times. Full disk: no tmpfs is mounted (the test may not
# be allowed to); the injected ENOSPC of the same hook
# (MIXPREC_FAULT_WRITE_ENOSPC=N) and a real file-size limit (ulimit -f, SIGXFSZ
# ignored, so write(2) fails with EFBIG) stand in for it. The hooks are only in
# the test build of the command (build/mixprec-fault, $MIXPREC); the release
# command ($MIXPREC_RELEASE, when given) must ignore them.
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1

for i in $(seq 1 40); do echo "The cat sat on the mat, and the dog sat on the log number $i."; done > c.txt
G=("$M" train --model gpt:1-2-16-16 --data text:c.txt --batch 4 --threads 1)
size() { stat -c %s "$1"; }
temps() { ls ck.st.tmp.* 2>/dev/null; } # what a killed writer leaves
# run EXPECTED_STATUS ARGS... : one training run, stderr in $err
run() {
    local want=$1; shift
    { "$@" >/dev/null 2>err.txt; } 2>/dev/null; local got=$? # (no "Killed" from bash)
    err=$(cat err.txt)
    if [ "$got" -ne "$want" ]; then fail "'$*' exited $got, expected $want (stderr: $err)"; return 1; fi
}
one_line() { # one line on stderr, naming $1
    if [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && printf '%s' "$err" | grep -q -- "$1"; then ok
    else fail "expected one line with '$1' on stderr, got: $err"; fi
}
same() { if cmp -s "$1" "$2"; then ok; else fail "$3: $1 differs from $2"; fi; }
complete_rows() { # the CSV holds complete rows only: each ends in a newline and has the header's columns
    local cols
    cols=$(head -1 "$1" | awk -F, '{print NF}')
    if [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ] &&
       awk -F, -v n="$cols" 'NF != n { exit 1 }' "$1"; then ok
    else fail "$1: not complete rows only"; fi
}

# the old checkpoint (step 3) and the new one (step 6, resumed from the old)
run 0 "${G[@]}" --steps 3 --save old.st --log old.csv --summary old.json || exit 1
run 0 "${G[@]}" --steps 6 --resume old.st --save new.st || exit 1
run 0 "${G[@]}" --steps 7 --resume new.st --save new7.st || exit 1
S=$(size new.st)
if [ "$(size old.st)" -eq "$S" ] && ! cmp -s old.st new.st; then ok; else fail "old and new checkpoints"; fi

# 1. the hook kills the writer after N bytes, N from 0 to the whole file (the
#    last: written, not yet synced or renamed): the old checkpoint stays, with
#    the temporary file of exactly N bytes beside it; resuming from it and
#    saving over it gives the new checkpoint and removes the stale file
points=0
for k in $(seq 0 24) s; do
    if [ "$k" = s ]; then N=9; else N=$((k * S / 24)); fi # 9: inside the header's length and JSON
    cp old.st ck.st
    MIXPREC_FAULT_WRITE_KILL_AFTER=$N run 137 "${G[@]}" --steps 6 --resume ck.st --save ck.st || continue
    same ck.st old.st "killed after $N bytes"
    t=$(temps)
    if [ "$(printf '%s\n' "$t" | grep -c .)" -eq 1 ] && [ "$(size "$t")" -eq "$N" ]; then ok
    else fail "killed after $N bytes: expected one temporary file of $N bytes, found: $t"; fi
    run 0 "${G[@]}" --steps 6 --resume ck.st --save ck.st && same ck.st new.st "resumed after a kill at $N"
    if [ -z "$(temps)" ]; then ok; else fail "stale temporary files after the next save: $(temps)"; fi
    points=$((points + 1))
done
[ "$points" -ge 20 ] && ok || fail "only $points kill points"

# 2. real SIGKILLs from outside, at random times during a run that trains,
#    writes its log and saves (kills 1-6), or as soon as its temporary
#    checkpoint appears (7-9) or a random 0-1 ms later (10-12): while writing,
#    syncing or renaming.
#    the checkpoint is the old or the new one, whole, it resumes to the same
#    bytes as an uninterrupted run, and the log's finished lines are whole rows
run 0 "${G[@]}" --steps 40 --resume old.st --save new40.st || exit 1
run 0 "${G[@]}" --steps 41 --resume new40.st --save new41.st || exit 1
t0=$(date +%s%N)
run 0 "${G[@]}" --steps 40 --resume old.st --save ck.st --log ck.csv
D=$((($(date +%s%N) - t0) / 1000)) # microseconds
RANDOM=14
kept_old=0 kept_new=0 mid_write=0
for i in $(seq 1 12); do
    cp old.st ck.st
    rm -f ck.csv
    [ "$i" -gt 6 ] && D=1000
    delay=$(awk -v d="$D" -v r="$RANDOM" 'BEGIN { printf "%.6f", d * r / 32768 / 1e6 }')
    "${G[@]}" --steps 40 --resume old.st --save ck.st --log ck.csv >/dev/null 2>&1 &
    pid=$!
    if [ "$i" -gt 6 ]; then
        while ! compgen -G 'ck.st.tmp.*' >/dev/null && kill -0 "$pid" 2>/dev/null; do :; done
    fi
    [ "$i" -ge 7 ] && [ "$i" -le 9 ] || sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ -n "$(temps)" ] && mid_write=$((mid_write + 1))
    if cmp -s ck.st old.st; then kept_old=$((kept_old + 1)); ok
    elif cmp -s ck.st new40.st; then kept_new=$((kept_new + 1)); ok
    else fail "SIGKILL $i: the checkpoint is neither the old nor the new one"; fi
    # the log streams into ck.csv.partial.PID, renamed to ck.csv at the very end: whichever is there holds whole rows
    for f in ck.csv ck.csv.partial.*; do
        [ -s "$f" ] || continue
        cols=$(head -1 "$f" | awk -F, '{print NF}')
        if head -n "$(wc -l < "$f")" "$f" | awk -F, -v n="$cols" 'NF != n { exit 1 }'; then ok
        else fail "SIGKILL $i: a broken row in $f"; fi
    done
    if [ -e ck.csv ] && compgen -G 'ck.csv.partial.*' >/dev/null; then fail "SIGKILL $i: both ck.csv and ck.csv.partial.*"; fi
    rm -f ck.csv.partial.*
    run 0 "${G[@]}" --steps 41 --resume ck.st --save ck.st && same ck.st new41.st "resumed after SIGKILL $i"
    if [ -z "$(temps)" ]; then ok; else fail "stale temporary files after the next save: $(temps)"; fi
done
echo "SIGKILL at random times: $kept_old kept the old checkpoint ($mid_write of them while writing it), $kept_new the new"
# a run killed while it trains leaves its log's path as it was and every row so far in PATH.partial.PID
echo "an old log" > ck.csv
"${G[@]}" --steps 400 --resume old.st --log ck.csv >/dev/null 2>&1 &
pid=$!
while [ "$(cat ck.csv.partial.$pid 2>/dev/null | wc -l)" -lt 4 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ "$(cat ck.csv)" = "an old log" ]; then ok; else fail "a killed run changed its log's path"; fi
complete_rows ck.csv.partial.$pid
# the next run's rows go to a partial file of its own: the killed run's rows stay
cp ck.csv.partial.$pid killed.csv
run 0 "${G[@]}" --steps 5 --resume old.st --log ck.csv
same ck.csv.partial.$pid killed.csv "the killed run's rows after the next run"
[ "$(wc -l < ck.csv)" -eq 3 ] && ok || fail "the next run's log: $(wc -l < ck.csv) lines"
rm -f ck.csv ck.csv.partial.* killed.csv

# 3. a full disk (injected ENOSPC) at any point of the checkpoint: one line,
#    status 1, the old checkpoint, no temporary file
for N in 0 8 $((S / 2)) $((S - 1)); do
    cp old.st ck.st
    MIXPREC_FAULT_WRITE_ENOSPC=$N run 1 "${G[@]}" --steps 6 --resume ck.st --save ck.st && one_line 'No space left on device'
    same ck.st old.st "ENOSPC after $N bytes"
    if [ -z "$(temps)" ]; then ok; else fail "ENOSPC left $(temps)"; fi
done
# ... in the summary: the old one stays, the log (not written through the hook) is complete
cp old.json ck.json
MIXPREC_FAULT_WRITE_ENOSPC=100 run 1 "${G[@]}" --steps 6 --resume old.st --summary ck.json --log ck.csv &&
    one_line 'ck.json: write failed (No space left on device); the previous file is untouched; written: --log ck.csv$'
same ck.json old.json "summary after ENOSPC"
complete_rows ck.csv
[ "$(wc -l < ck.csv)" -eq 4 ] && ok || fail "the log after ENOSPC in the summary: $(wc -l < ck.csv) lines, expected 4"
# an output that cannot be written is found before anything is trained: the checkpoint stays the old one
cp old.st ck.st
run 1 "${G[@]}" --steps 6 --resume ck.st --save ck.st --summary nodir/ck.json &&
    one_line 'summary nodir/ck.json: the directory nodir does not exist'
same ck.st old.st "the checkpoint when the summary's directory is missing"
# ... in compare: its files are written into DIR/.partial and replace DIR's
# together once the report and summary.json are whole. A full disk at the
# report (the largest file): every file of DIR as it was and no other, the new
# run's files in DIR/.partial; killed while writing the report: the same; the
# next comparison that completes moves its files in and removes DIR/.partial
CMP=(compare --precisions fp32,bf16 --out cmp --model gpt:1-2-16-16 --data text:c.txt --batch 4 --threads 1)
run 0 "$M" "${CMP[@]}" --steps 2 && (cd cmp && sha256sum ./* > ../cmp.sums)
unchanged() {
    if (cd cmp && sha256sum --quiet -c ../cmp.sums) && [ "$(find cmp -maxdepth 1 -type f | wc -l)" -eq "$(wc -l < cmp.sums)" ]
    then ok; else fail "$1: the files of cmp changed: $(ls -A cmp)"; fi
}
R=$(size cmp/report.html)
N=$(((R + $(size cmp/summary.json)) / 2))
if [ "$(size cmp/summary.json)" -lt "$N" ] && [ "$(size cmp/fp32.json)" -lt "$N" ]; then ok; else fail "report sizes"; fi
MIXPREC_FAULT_WRITE_ENOSPC=$N run 1 "$M" "${CMP[@]}" --steps 3 &&
    one_line "cmp/.partial/report.html: write failed (No space left on device): cmp is as it was, this comparison's files are in cmp/.partial$"
unchanged "a full disk at the report"
if [ "$(wc -l < cmp/.partial/fp32.csv)" -eq 4 ] && [ -s cmp/.partial/bf16.txt ] && [ -s cmp/.partial/summary.json ] &&
   [ ! -e cmp/.partial/report.html ]; then ok; else fail "the new files after ENOSPC: $(ls -A cmp/.partial)"; fi
if [ -z "$(ls cmp/*.tmp.* cmp/.partial/*.tmp.* 2>/dev/null)" ]; then ok; else fail "ENOSPC left $(ls cmp/*.tmp.* cmp/.partial/*.tmp.*)"; fi
MIXPREC_FAULT_WRITE_KILL_AFTER=$N run 137 "$M" "${CMP[@]}" --steps 4
unchanged "killed while writing the report"
run 0 "$M" "${CMP[@]}" --steps 3
if [ "$(wc -l < cmp/fp32.csv)" -eq 4 ] && [ "$(wc -l < cmp/bf16.csv)" -eq 4 ] && [ ! -e cmp/.partial ] &&
   ! (cd cmp && sha256sum --quiet -c ../cmp.sums > /dev/null 2>&1); then ok
else fail "the comparison after the failed ones: $(ls -A cmp)"; fi

# 4. a real limit (ulimit -f: write(2) fails with EFBIG; mixprec ignores SIGXFSZ
#    itself): a checkpoint (97 KB) that cannot fit under 64 KiB is refused before
#    the first step, every file as it was; then, without --save, the log
#    outgrows 40 KiB: its complete rows stay, the run stops there and still
#    writes its summary, whole, saying why it stopped
limited() { local kb=$1; shift; (ulimit -f "$kb" && exec "$@"); }
cp old.st ck.st && cp old.json ck.json && cp ck.csv old.csv
run 1 limited 64 "${G[@]}" --steps 6 --resume ck.st --save ck.st --summary ck.json --log ck.csv &&
    one_line '--save ck.st: the checkpoint holds at least [0-9]* bytes (weights and optimizer state), and this process may write files of at most 65536 bytes (ulimit -f)'
same ck.st old.st "checkpoint under ulimit -f"
same ck.json old.json "summary of a run refused under ulimit -f"
same ck.csv old.csv "log of a run refused under ulimit -f"
if [ -z "$(temps)" ] && ! compgen -G 'ck.csv.partial*' >/dev/null; then ok; else fail "a refused run left $(temps) $(ls ck.csv.* 2>/dev/null)"; fi
run 1 limited 40 "${G[@]}" --steps 200 --resume ck.st --summary ck.json --log ck.csv &&
    one_line 'ck.csv: cannot append to the log (File too large); ck.csv.partial.[0-9]* keeps the [0-9]* complete lines before, ck.csv is as it was'
P=$(printf '%s' "$err" | sed -n 's/.*; \(ck.csv.partial.[0-9]*\) keeps.*/\1/p') # the file the message names holds the rows
complete_rows "$P"
same ck.csv old.csv "the log's path when its rows could not all be written"
lines=$(printf '%s' "$err" | sed -n 's/.*keeps the \([0-9]*\) complete lines.*/\1/p')
if [ "$(wc -l < "$P")" = "$lines" ] && [ "$(size "$P")" -le 40960 ] && [ "$lines" -gt 10 ]; then ok
else fail "log under ulimit -f: $(wc -l < "$P") lines, $(size "$P") bytes, message: $err"; fi
same ck.st old.st "checkpoint after the log failed"
if [ "$(tail -c 1 ck.json)" = '}' ] && ! cmp -s ck.json old.json &&
   grep -q "stopped: ck.csv: the log could not be written" ck.json; then ok
else fail "the summary of a run stopped by its log"; fi
if [ -z "$(temps)" ]; then ok; else fail "EFBIG left $(temps)"; fi
run 0 "${G[@]}" --steps 7 --resume ck.st --save ck.st && same ck.st new7.st "resumed after the full disk"

# 6. a run that ends worse never writes over a checkpoint: ending NaN (--lr 1e6) or stopping early (the loss
#    scale at its floor) leaves --save's file as it was, writes its state beside it as PATH.rejected (never over
#    a file there either), exits 1 and says where the state is; the file --save kept still resumes
cp old.st ck.st && rm -f ck.st.rejected
run 1 "${G[@]}" --steps 8 --lr 1e6 --resume ck.st --save ck.st &&
    one_line "^mixprec train: --save ck.st: the run ended with a [a-z]* loss of [NaNinf]*, so it is not written over; this run's state (step 8) is in ck.st.rejected$"
same ck.st old.st "the checkpoint after a run that ended NaN"
run 1 "${G[@]}" --steps 9 --resume ck.st.rejected && one_line 'ck.st.rejected: .*non-finite' # what --resume refuses
cp ck.st.rejected rejected.bak
run 1 "${G[@]}" --steps 8 --lr 1e6 --resume ck.st --save ck.st &&
    one_line "this run's state is not written either (ck.st.rejected: a file is there already, and it is not replaced"
same ck.st old.st "the checkpoint after a second run that ended NaN"
same ck.st.rejected rejected.bak "the state beside it after a second run that ended NaN"
run 0 "${G[@]}" --steps 6 --resume ck.st --save ck.st && same ck.st new.st "resumed from the checkpoint a NaN run kept"
cp old.st ck.st && rm -f ck.st.rejected
run 1 "${G[@]}" --steps 9 --precision fp16-dynamic --init-scale 1 --min-scale 1 --max-scale 1 --lr 1e6 --save ck.st &&
    one_line "^mixprec train: --save ck.st: the run stopped early (loss scale already at minimum .*), so it is not written over; this run's state (step [0-9]*) is in ck.st.rejected$"
same ck.st old.st "the checkpoint after a run that stopped early"
[ -s ck.st.rejected ] && ok || fail "the state of the run that stopped early"
if [ -z "$(temps)" ] && [ -z "$(ls ck.st.rejected.tmp.* ck.st.lock ck.st.rejected.lock 2>/dev/null)" ]; then ok; else fail "left: $(ls ck.st.*)"; fi
# the same in a comparison's DIR: a mode that ends worse keeps the earlier comparison's MODE.ckpt (its bytes,
# and named by the new summary), its state beside it as MODE.ckpt.rejected, messages naming DIR's files, exit 1
CC=(compare --model gpt:1-2-16-16 --data text:c.txt --batch 4 --threads 1 --steps 3 --precisions fp32 --checkpoints)
rm -rf cg && run 0 "$M" "${CC[@]}" --out cg && cp cg/fp32.ckpt good.ckpt
run 1 "$M" "${CC[@]}" --out cg --lr 1e6 &&
    if printf '%s' "$err" | grep -q "^mixprec compare: cg/fp32.ckpt: .* so it is not written over; this run's state (step 3) is in cg/fp32.ckpt.rejected; written: cg/fp32.csv, cg/fp32.json$" &&
       printf '%s' "$err" | grep -q "^mixprec compare: --checkpoints: fp32 ended worse" && ! printf '%s' "$err" | grep -q partial
    then ok; else fail "compare's messages for a mode that ended worse: $err"; fi
same cg/fp32.ckpt good.ckpt "an earlier comparison's checkpoint after a mode ended worse"
[ -s cg/fp32.ckpt.rejected ] && grep -q '"fp32.ckpt"' cg/summary.json && ok || fail "cg: $(ls cg)"
run 0 "$M" "${CC[@]}" --out cg --seed 2 && ! cmp -s cg/fp32.ckpt good.ckpt && [ ! -e cg/fp32.ckpt.rejected ] && ok ||
    fail "a comparison that ends well replaces the kept checkpoint and removes the rejected state: $(ls cg)"

# 5. the commit of a comparison killed at each rename (strace injects SIGKILL at
#    the Nth rename(2): the renames of its files into DIR/.partial, the decision
#    (summary.json -> .commit), the moves into DIR, summary.json last). After
#    each kill DIR is wholly the old comparison (fp32 and bf16, 2 steps) or
#    wholly the new one (fp32, 3 steps; bf16's files removed), or DIR/.partial/.commit
#    says a commit was cut and names the new files (each in DIR, new, or still in
#    DIR/.partial); the next comparison into DIR completes it before anything else
#    (here one whose own report and summary then fail: DIR is wholly the cut one).
#    The locks of the files it was moving stay behind, unlocked (DIR/NAME.lock),
#    until the comparison that completes it takes them over and removes them.
if command -v strace >/dev/null && strace -f -o /dev/null true 2>/dev/null; then
    CK=(compare --model gpt:1-2-16-16 --data text:c.txt --batch 4 --threads 1)
    rm -rf cmp cmp.old && run 0 "$M" "${CK[@]}" --precisions fp32,bf16 --steps 2 --out cmp && cp -a cmp cmp.old
    files_of() { sed -n '/"files"/,/]/p' "$1" | grep -o '"[^"]*\.[a-z]*"' | tr -d '"' | sort | tr '\n' ' '; }
    NEW='fp32.csv fp32.json fp32.txt report.html '
    wholly_new() { # DIR is the new comparison, no other file of compare's
        [ "$(files_of cmp/summary.json)" = "$NEW" ] && [ "$(wc -l < cmp/fp32.csv)" -eq 4 ] &&
            grep -q '"steps":	3' cmp/fp32.json && [ -z "$(ls cmp/bf16.* 2>/dev/null)" ]
    }
    cuts=0 olds=0 news=0
    for N in $(seq 1 20); do
        rm -rf cmp && cp -a cmp.old cmp
        # (LeakSanitizer cannot run under ptrace: off for these runs of an ASan build)
        { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -o /dev/null \
            -e inject=rename:signal=SIGKILL:when=$N "$M" "${CK[@]}" --precisions fp32 --steps 3 --out cmp >/dev/null 2>&1; } 2>/dev/null
        rc=$?
        if [ "$rc" -eq 0 ]; then # past the last rename: done
            if wholly_new && [ ! -e cmp/.partial ]; then ok; else fail "compare with no kill: $(ls -A cmp)"; fi
            break
        fi
        if [ -e cmp/.partial/.commit ]; then
            cuts=$((cuts + 1))
            bad=
            [ "$(files_of cmp/.partial/.commit)" = "$NEW" ] || bad="$bad .commit names $(files_of cmp/.partial/.commit);"
            diff -q cmp.old/summary.json cmp/summary.json >/dev/null || bad="$bad summary.json is not the old one;"
            for f in $NEW; do
                if [ -e "cmp/.partial/$f" ]; then continue; fi
                [ "$f" != fp32.csv ] || [ "$(wc -l < cmp/fp32.csv)" -eq 4 ] || bad="$bad cmp/fp32.csv is not the new one;"
            done
            [ -z "$bad" ] && ok || fail "killed at rename $N:$bad"
            MIXPREC_FAULT_WRITE_ENOSPC=0 run 1 "$M" "${CK[@]}" --precisions fp32 --steps 5 --out cmp
            if wholly_new && [ ! -e cmp/.partial/.commit ] && [ -z "$(ls cmp/*.lock 2>/dev/null)" ]; then ok
            else fail "the cut commit at rename $N, completed: $(ls -A cmp) $(files_of cmp/summary.json)"; fi
        elif diff -rq -x .partial -x '*.lock' cmp.old cmp >/dev/null; then olds=$((olds + 1)); ok # (a killed commit's locks stay)
        elif wholly_new; then news=$((news + 1)); ok
        else fail "killed at rename $N: cmp is neither old nor new nor a cut commit: $(ls -A cmp)"; fi
    done
    [ "$cuts" -ge 4 ] && [ "$olds" -ge 4 ] && ok || fail "compare's commit: $olds kills left it old, $cuts cut"
    echo "compare killed at each rename: $olds left DIR old, $cuts cut the commit (completed by the next), $news new"
else
    echo "strace cannot trace here: the kills of compare's commit are not run"
fi

# the release command has no fault hooks: the same variables change nothing
if [ -n "${MIXPREC_RELEASE:-}" ]; then
    MIXPREC_FAULT_WRITE_ENOSPC=0 MIXPREC_FAULT_WRITE_KILL_AFTER=0 run 0 "$MIXPREC_RELEASE" "${G[@]:1}" --steps 3 \
        --save rel.st && same rel.st old.st "the release command under MIXPREC_FAULT_*"
fi

done_
