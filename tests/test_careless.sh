#!/usr/bin/env bash
# test_careless.sh - a careless user: every command that reads and writes
# files, run with each output option pointed at each of its inputs and at each
# other output, spelled four ways (the path, "./" through its directory, a hard
# link, a symbolic link); and each output pointed at a directory, a device and
# a missing directory. Each run must be refused before it works (exit 2 for an
# output that is an input or another output, 1 for a place that cannot be
# written), with one line naming the option, and leave every file as it was:
# the same names, the same bytes (sha256), nothing created.
#   train (GPT and MLP): --log --summary --save --dump-grads against --init,
#     --resume and --data (a text file, a corpus directory, the MLP's IDX files)
#   compare: DIR's files (MODE.csv/.json/.txt/.ckpt, report.html, summary.json,
#     DIR/.partial's) against --init and --data
#   explore: --out against --from
#   every input option of train, compare, sample, underflow and explore given
#     a FIFO, a directory and a device: refused at once, in one line
#   links, FIFOs and files of someone else's at the names written beside an
#     output (PATH.partial.PID, PATH.lock), and a second writer of each output
#     (train's four, compare's DIR, explore's page); a DIR whose files compare
#     did not write
#   train under mpirun -np 2, where this mixprec has MPI
. "$(dirname "$0")/lib.sh"
# held FILE PID: waits until FILE exists and is flock(2)ed (its inode in /proc/locks; probing with a lock of
# our own could make the writer's non-blocking flock fail), or PID has ended
held() {
    local ino
    while kill -0 "$2" 2>/dev/null; do
        ino=$(stat -c %i "$1" 2>/dev/null) && grep -q ":$ino " /proc/locks && return
        sleep 0.002
    done
}
W=$T/w # the user's files; $T holds the test's own
mkdir -p "$W/corpus" "$W/fm"
for i in $(seq 1 60); do echo "The cat sat on the mat, and the dog sat on the log number $i."; done > "$W/c.txt"
cp "$W/c.txt" "$W/corpus/a.txt"
for f in /usr/share/datasets/fashion-mnist/*-ubyte.gz; do cp "$f" "$W/fm/"; done
GPT=(train --model gpt:1-2-16-16 --batch 4 --threads 1)
MLP=(train --model mlp:784-16-10 --batch 8 --threads 1)
"$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 2 --save "$W/g.st" > /dev/null || fail "the GPT checkpoint"
"$M" "${MLP[@]}" --data "$W/fm" --steps 2 --save "$W/m.st" --dump-grads "$W/m.grads" > /dev/null || fail "the MLP checkpoint"
"$M" compare --model gpt:1-2-16-16 --batch 4 --threads 1 --steps 1 --data "text:$W/c.txt" --precisions fp32,bf16 \
    --checkpoints --out "$W/cmp" > /dev/null || fail "the comparison"
echo "a log" > "$W/old.csv"
# every name (links with their targets), size, inode and modification time; the bytes of the files under 1 MB
# (the dataset's are only read: its time says a write)
snapshot() {
    (cd "$W" && find . \( -type f -o -type l \) -printf '%p %l %s %i %T@\n' | sort &&
        find . -type f -size -1M -print0 | sort -z | xargs -0 sha256sum)
}
snapshot > "$T/before"

# The path p spelled the k-th way (0 .. 3), made where needed: p itself, p
# through its directory and "./" and "../", a hard link to p, a symbolic link
# to p. A spelling of a file that does not exist yet (a new output) is the
# path or the "./" one.
spell() {
    local p=$1 k=$2 d b
    d=$(dirname "$p") b=$(basename "$p")
    case $((k % 4)) in
        0) echo "$p" ;;
        1) echo "$d/./../$(basename "$d")/$b" ;;
        2) if [ -f "$p" ]; then ln -f "$p" "$T/hard.$b" 2>/dev/null && echo "$T/hard.$b" || echo "$p"; else echo "$p"; fi ;;
        3) if [ -e "$p" ]; then ln -sf "$p" "$T/sym.$b" && echo "$T/sym.$b"; else echo "$d/./$b"; fi ;;
    esac
}
runs=0
# refused STATUS PATTERN ARGS...: exit STATUS, one line matching PATTERN, every file of $W as it was
refused() {
    local want=$1 pat=$2; shift 2
    runs=$((runs + 1))
    "$@" > "$T/out" 2> "$T/err"; local got=$?
    local err
    err=$(cat "$T/err")
    if [ "$got" -ne "$want" ]; then fail "'$*' exited $got, expected $want: $err"; return; fi
    [ -n "${MPI_LINES:-}" ] && grep '^mixprec' "$T/err" > "$T/err1" && mv "$T/err1" "$T/err" # mpirun adds its own
    if [ "$(wc -l < "$T/err")" -ne 1 ] || ! grep -qE -- "$pat" "$T/err"; then fail "'$*': expected one line /$pat/, got: $err"; return; fi
    snapshot > "$T/after"
    if cmp -s "$T/before" "$T/after"; then ok; else fail "'$*' changed the files: $(diff "$T/before" "$T/after" | head -5)"; fi
    rm -f "$T"/hard.* "$T"/sym.*
}

# 1. train: each output against each input, and against each other output
outs=(--log --summary --save --dump-grads)
k=0
for o in "${outs[@]}"; do
    for in in "--init $W/g.st" "--resume $W/g.st" "--data $W/c.txt"; do
        set -- $in
        [ "$o $1" = "--save --resume" ] && continue # a checkpoint advanced in place (tests/test_cli.sh)
        data=(--data "text:$W/c.txt")
        [ "$1" = --data ] && data=()
        arg=$2
        [ "$1" = --data ] && arg="text:$2"
        p=$(spell "$2" $k)
        k=$((k + 1))
        refused 2 "$o .* is the file $1 reads" "$M" "${GPT[@]}" "${data[@]}" --steps 3 "$1" "$arg" "$o" "$p"
    done
    refused 2 "$o .* is inside the corpus directory" "$M" "${GPT[@]}" --data "text:$W/corpus" --steps 1 "$o" "$(spell "$W/corpus/x" $k)"
    refused 2 "$o .* is the file --data reads" "$M" "${MLP[@]}" --data "$W/fm" --steps 1 "$o" "$(spell "$W/fm/t10k-labels-idx1-ubyte.gz" $k)"
    refused 2 "$o .* is the file --init reads" "$M" "${MLP[@]}" --data "$W/fm" --steps 1 --init "$W/m.st" "$o" "$(spell "$W/m.st" $k)"
    for o2 in "${outs[@]}"; do
        [ "$o" = "$o2" ] && continue
        refused 2 "name the same file" "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$o" "$W/old.csv" "$o2" "$(spell "$W/old.csv" $k)"
        refused 2 "name the same file" "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$o" "$W/new.csv" "$o2" "$(spell "$W/new.csv" $k)"
        k=$((k + 1))
    done
    # places that cannot be written: found before training, nothing created
    refused 1 "$o $W/cmp is a directory, not a regular file" "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$o" "$W/cmp"
    refused 1 "$o /dev/null is a device" "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$o" /dev/null
    refused 1 "$o $W/nodir/x: the directory $W/nodir does not exist" "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$o" "$W/nodir/x"
    refused 2 "$o is empty" "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$o" ""
done

# 2. compare: each file of DIR (and of DIR/.partial, which it empties of its own names first) against --init and --data
CMP=(compare --model gpt:1-2-16-16 --batch 4 --threads 1 --steps 1 --precisions fp32,bf16 --checkpoints --out "$W/cmp")
for f in fp32.csv bf16.json fp32.txt bf16.ckpt report.html summary.json; do
    refused 2 "cmp/$f is the file --init reads" "$M" "${CMP[@]}" --data "text:$W/c.txt" --init "$(spell "$W/cmp/$f" $k)"
    refused 2 "cmp/$f is the file --data reads" "$M" "${CMP[@]}" --data "text:$(spell "$W/cmp/$f" $k)"
    k=$((k + 1))
done
refused 2 "cmp/.partial/fp32.json is the file --init reads" "$M" "${CMP[@]}" --data "text:$W/c.txt" --init "$W/cmp/.partial/fp32.json"
refused 1 "--out $W/c.txt is not a directory" "$M" "${CMP[@]/$W\/cmp/$W/c.txt}" --data "text:$W/corpus/a.txt"
refused 2 "--dump-grads names one file" "$M" "${CMP[@]}" --data "text:$W/c.txt" --dump-grads "$W/g.st"
refused 2 "--log is set by compare itself" "$M" "${CMP[@]}" --data "text:$W/c.txt" --log "$W/g.st"

# 3. explore: --out against --from, and places that cannot be written
for k in 0 1 2 3; do
    refused 2 "--out .* is the file --from reads" "$M" explore --from "$W/m.grads" --out "$(spell "$W/m.grads" $k)"
done
refused 1 "--out /dev/null is a device" "$M" explore --from "$W/m.grads" --out /dev/null
refused 1 "--out $W/cmp is a directory" "$M" explore --from "$W/m.grads" --out "$W/cmp"
refused 1 "the directory $W/nodir does not exist" "$M" explore --out "$W/nodir/x.html"
# a name that fits but leaves no room for the files written beside it (PATH.tmp.PID.XXXXXX, PATH.lock):
# refused before the first step, not when the checkpoint is written at the end
long=$(printf 'n%.0s' $(seq 1 245))
for opt in --log --summary --save --dump-grads; do
    refused 2 "$opt .*: a name of 245 bytes is too long for the files written beside it" \
        "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$opt" "$W/$long"
done
refused 2 "--out .*: a name of 245 bytes is too long" "$M" explore --from "$W/m.grads" --out "$W/$long"

# 5. inputs that are not regular files: every command and every input option given a FIFO (no writer: a
# reader that opened it would block, and timeout would end the run with 124), a directory and a device,
# refused before it reads, in one line naming the option, the path and what it is
mkdir -p "$T/sp/dir" "$T/sp/fm"
mkfifo "$T/sp/fifo"
kinds=("$T/sp/fifo:a FIFO" "$T/sp/dir:a directory" "/dev/null:a device")
for kd in "${kinds[@]}"; do
    x=${kd%%:*} what=${kd#*:}
    for opt in --init --resume; do
        refused 1 "$opt $x is $what, not a regular file" timeout 10 "$M" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 "$opt" "$x"
    done
    refused 1 "--init $x is $what, not a regular file" timeout 10 "$M" "${MLP[@]}" --data "$W/fm" --steps 1 --init "$x"
    refused 1 "--init $x is $what, not a regular file" timeout 10 "$M" "${CMP[@]/$W\/cmp/$T/sp/out}" --data "text:$W/c.txt" --init "$x"
    refused 1 "--from $x is $what, not a regular file" timeout 10 "$M" sample --from "$x"
    refused 1 "--from $x is $what, not a regular file" timeout 10 "$M" underflow --from "$x"
    refused 1 "--from $x is $what, not a regular file" timeout 10 "$M" explore --from "$x" --out "$T/sp/x.html"
done
for x in "$T/sp/fifo" /dev/zero; do # a text corpus may be a directory (of texts)
    refused 1 "--data $x is a (FIFO|device), not a regular file or a directory" timeout 10 "$M" "${GPT[@]}" --data "text:$x" --steps 1
    refused 1 "--data $x is a (FIFO|device), not a regular file or a directory" timeout 10 "$M" "${CMP[@]/$W\/cmp/$T/sp/out}" --data "text:$x"
    refused 1 "--data $x is a (FIFO|device), not a regular file" timeout 10 "$M" sample --from "$W/g.st" --judge --data "text:$x"
done
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    rm -f "$T/sp/fm"/*
    for g in "$W"/fm/*; do ln -s "$g" "$T/sp/fm/"; done
    rm -f "$T/sp/fm/$f.gz" && mkfifo "$T/sp/fm/$f" # the MLP's data directory with one of its files a FIFO
    refused 1 "--data $T/sp/fm/$f is a FIFO, not a regular file" timeout 10 "$M" "${MLP[@]}" --data "$T/sp/fm" --steps 1
done
[ ! -e "$T/sp/out" ] && [ ! -e "$T/sp/x.html" ] && ok || fail "a refused run created its output"

# 6. traps at the names mixprec writes beside an output, and a second writer of
#    each output: in a directory of their own ($T/own), each run's files checked
here=$PWD
mkdir -p "$T/own" && cd "$T/own" || exit 1
G=("$M" "${GPT[@]}" --data "text:$W/c.txt")
echo "someone's file" > target && cp target target.orig
# a link at the log's partial file (this run's own name: PATH.partial.PID, the PID exec keeps) and at the old names
expect 1 bash -c 'ln -s target "x.csv.partial.$BASHPID" && ln -sf target x.csv.partial && ln -sf target "x.st.tmp.$BASHPID" &&
    exec "$0" "$@"' "${G[@]}" --steps 2 --log x.csv --save x.st && one_line &&
    has "$err" 'x.csv.partial.[0-9]+: cannot create the log \(a file is there already\)'
cmp -s target target.orig && [ ! -e x.csv ] && [ ! -e x.st ] && ok || fail "a link at a partial file: $(ls -l)"
expect 0 "${G[@]}" --steps 2 --log x.csv --save x.st --summary x.json # the links at the old names are left alone
cmp -s target target.orig && [ -f x.csv ] && [ ! -L x.csv ] && [ "$(wc -l < x.csv)" -eq 3 ] && [ -L x.csv.partial ] &&
    [ -z "$(ls x.*.lock x.st.tmp.*[!0-9]* 2>/dev/null)" ] && ok || fail "the outputs beside the links: $(ls -l)"
rm -f x.*
# the lock file: a link, a FIFO or a file of someone else's at PATH.lock is refused and left as it was
ln -s target l.csv.lock && mkfifo l.json.lock && echo "my notes" > l.st.lock
expect 1 "${G[@]}" --steps 2 --log l.csv && one_line && has "$err" '--log l.csv: cannot create its lock file l.csv.lock \(it is a symbolic link\)'
expect 1 "${G[@]}" --steps 2 --summary l.json && one_line && has "$err" '--summary l.json: its lock file l.json.lock is not a regular file'
expect 1 "${G[@]}" --steps 2 --save l.st && one_line && has "$err" '--save l.st: l.st.lock is a file mixprec did not write'
cmp -s target target.orig && [ -p l.json.lock ] && [ "$(cat l.st.lock)" = "my notes" ] && [ -z "$(ls l.csv l.json l.st 2>/dev/null)" ] &&
    ok || fail "the traps at the lock files: $(ls -l)"
# two writers: a run holding every output (stopped once its lock is there), then a run for each of them: refused,
# one line naming the output; the first run's files whole once it ends
"${G[@]}" --steps 600 --log s.csv --summary s.json --save s.st --dump-grads s.g > first.txt 2>&1 &
pid=$!
held "s.g.lock" "$pid" # the lock file exists before it is flock(2)ed: wait until it is held
kill -STOP "$pid"
for o in "--log s.csv" "--summary s.json" "--save s.st" "--dump-grads s.g"; do
    set -- $o
    expect 1 "${G[@]}" --steps 2 "$1" "$2" && one_line &&
        has "$err" "^mixprec train: $1 $2: another mixprec process \\(pid $pid\\) is writing it \\(it holds $2.lock\\)"
done
kill -CONT "$pid"
wait "$pid" && ok || fail "the first writer: $(cat first.txt)"
[ "$(wc -l < s.csv)" -eq 601 ] && awk -F, -v n="$(head -1 s.csv | awk -F, '{print NF}')" 'NF != n { exit 1 }' s.csv &&
    grep -q '"steps":	600' s.json && [ -s s.g ] && [ -z "$(ls s.*.lock s.csv.partial* 2>/dev/null)" ] && ok ||
    fail "the first writer's files: $(ls)"
expect 0 "${G[@]}" --steps 601 --resume s.st # its checkpoint whole
# compare: the second comparison into DIR refused while the first writes it; the first's DIR whole
CK=(compare --model gpt:1-2-16-16 --batch 4 --threads 1 --data "text:$W/c.txt" --precisions fp32)
"$M" "${CK[@]}" --steps 600 --out d > first.txt 2>&1 &
pid=$!
held "d/.partial/compare.lock" "$pid" # the lock file exists before it is flock(2)ed: wait until it is held
kill -STOP "$pid"
expect 1 "$M" "${CK[@]}" --steps 2 --out d && one_line &&
    has "$err" "^mixprec compare: --out d: d/.partial/compare: another mixprec process \\(pid $pid\\) is writing it"
kill -CONT "$pid"
wait "$pid" && ok || fail "the first comparison: $(cat first.txt)"
[ "$(wc -l < d/fp32.csv)" -eq 601 ] && grep -q '"written_by":	"mixprec compare"' d/summary.json && [ ! -e d/.partial ] &&
    ok || fail "the first comparison's files: $(ls -A d)"
# links in DIR/.partial at the names compare writes there: removed as links, their target untouched
mkdir -p dl/.partial && for f in fp32.txt fp32.json fp32.csv report.html summary.json; do
    cp target "t.$f" && ln -s "../../t.$f" "dl/.partial/$f"; done
expect 0 "$M" "${CK[@]}" --steps 2 --out dl
for f in fp32.txt fp32.json fp32.csv report.html summary.json; do cmp -s "t.$f" target.orig || fail "dl/.partial/$f's target changed"; done
[ "$(wc -l < dl/fp32.csv)" -eq 3 ] && [ -z "$(find dl -type l)" ] && [ ! -e dl/.partial ] && ok ||
    fail "compare with links in its stage: $(ls -lA dl dl/.partial 2>&1)"
# a file of DIR that another process is writing (its lock held: flock(1) here) when the comparison commits:
# the commit is refused, DIR as it was, the comparison's files in DIR/.partial; the next one, unhindered, commits
if command -v flock >/dev/null; then
    expect 0 "$M" "${CK[@]}" --steps 2 --out d2 && (cd d2 && sha256sum ./* > ../d2.sums)
    exec 9> d2/fp32.csv.lock && flock -n 9
    expect 1 "$M" "${CK[@]}" --steps 3 --out d2 && one_line &&
        has "$err" "d2/fp32.csv: another process is writing it .*: d2 is as it was, this comparison's files are in d2/.partial$"
    exec 9>&-
    (cd d2 && sha256sum --quiet -c ../d2.sums) && [ "$(wc -l < d2/.partial/fp32.csv)" -eq 4 ] && ok ||
        fail "DIR after a refused commit: $(ls -A d2 d2/.partial)"
    expect 0 "$M" "${CK[@]}" --steps 3 --out d2
    [ "$(wc -l < d2/fp32.csv)" -eq 4 ] && [ ! -e d2/.partial ] && [ -z "$(ls d2/*.lock 2>/dev/null)" ] && ok ||
        fail "DIR after the next comparison: $(ls -A d2)"
fi
# explore (a page written in one piece): refused while another process holds its lock (flock(1) here)
if command -v flock >/dev/null; then
    exec 9> e.html.lock && flock -n 9 # the lock belongs to fd 9's open file, this shell's, after flock(1) ends
    expect 1 "$M" explore --out e.html && one_line && has "$err" 'e.html: another process is writing it'
    [ ! -e e.html ] && ok || fail "explore wrote e.html under another's lock"
    exec 9>&-
    expect 0 "$M" explore --out e.html && [ -s e.html ] && [ ! -e e.html.lock ] && ok || fail "explore after the lock: $(ls)"
fi
# compare never replaces or removes a file it did not write: a summary.json of the user's (naming its own
# files), a file by a mode's name beside no summary of compare's
mkdir res && echo '{"files": ["results.csv", "notes.txt"]}' > res/summary.json && echo 1 > res/results.csv && echo 2 > res/notes.txt
(cd res && sha256sum * > ../res.sums)
expect 1 "$M" "${CK[@]}" --steps 2 --out res && one_line &&
    has "$err" '--out res: res/summary.json is not a summary that mixprec compare wrote: it is not replaced'
(cd res && sha256sum --quiet -c ../res.sums) && [ "$(ls -A res | wc -l)" -eq 3 ] && ok || fail "the user's res: $(ls -A res)"
mkdir mine && echo "my run" > mine/fp32.csv
expect 1 "$M" "${CK[@]}" --steps 2 --out mine && one_line &&
    has "$err" '--out mine: mine/fp32.csv is not a file that mixprec compare wrote there'
[ "$(cat mine/fp32.csv)" = "my run" ] && [ "$(ls -A mine)" = fp32.csv ] && ok || fail "the user's mine: $(ls -A mine)"
cd "$here" || exit 1

# 4. the data-parallel path: the same checks on rank 0, one message, every rank stops
# (in the plain build: under ASan, tests/test_mpi.sh's own runs are make test-long's)
if command -v mpirun > /dev/null && "$M" --version | grep -q 'MPI: ' && ! grep -q __asan_init "$M"; then
    # under ASan: Open MPI's own allocations at exit suppressed, as tests/test_mpi.sh does
    export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan_mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
    MPI=(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$M")
    MPI_LINES=1
    refused 2 "--log .* is the file --resume reads" "${MPI[@]}" "${GPT[@]}" --data "text:$W/c.txt" --steps 3 --resume "$W/g.st" --log "$(spell "$W/g.st" 2)"
    refused 1 "--save /dev/null is a device" "${MPI[@]}" "${GPT[@]}" --data "text:$W/c.txt" --steps 1 --save /dev/null
    refused 1 "--out /dev/null is not a directory" "${MPI[@]}" compare --model gpt:1-2-16-16 --batch 4 --steps 1 --data "text:$W/c.txt" --out /dev/null
else
    echo "test_careless.sh: no mpirun or no MPI in this mixprec: the data-parallel path is left to tests/test_mpi.sh"
fi
echo "$runs careless runs"
done_
