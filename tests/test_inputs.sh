#!/usr/bin/env bash
# test_inputs.sh - make test-long's sweep of what a file gives mixprec (the
# short forms are in tests/test_careless.sh and tests/test_cli.sh):
#   every field of every tensor a checkpoint holds, damaged one at a time (a
#     NaN, or an e4m3 NaN code), in checkpoints of every optimizer state
#     format, SGD with momentum, Kahan-compensated weights, a dynamic loss
#     scale and an fp8 recipe's amax histories: each --resume refused in one
#     line naming the tensor, exit 1;
#   every input option of every command given a socket (besides the FIFO, the
#     directory and the device of the short form): refused at once, one line.
. "$(dirname "$0")/lib.sh"
for i in $(seq 1 60); do echo "The cat sat on the mat, and the dog sat on the log number $i."; done > "$T/c.txt"
G=(train --model gpt:1-2-16-16 --data "text:$T/c.txt" --batch 4 --threads 1)
# damage SRC DST TENSOR: a copy of SRC with TENSOR's last element made a NaN (its dtype's), or no copy (exit 3) when
# every value of its dtype is valid (8-bit and 4-bit codes index a map of 256 or 16 entries)
damage() {
    python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name = sys.argv[1:4]
b = bytearray(open(src, "rb").read()); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
t = h[name]; end = 8 + n + t["data_offsets"][1]
nan = {"F32": struct.pack("<I", 0x7FC00000), "BF16": struct.pack("<H", 0x7FC0), "F16": struct.pack("<H", 0x7E00),
       "F8_E4M3": b"\x7f"}.get(t["dtype"])
if nan is None: sys.exit(3)
b[end - len(nan):end] = nan; open(dst, "wb").write(b)
PY
}
tensors() { python3 -c 'import json, struct, sys; b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
print("\n".join(k for k in json.loads(b[8:8 + n]) if k != "__metadata__"))' "$1"; }
runs=0
for cfg in "--precision bf16 --optim-state fp32" "--precision bf16 --optim-state bf16" "--precision bf16 --optim-state fp8" \
           "--precision bf16 --optim-state 8bit" "--precision bf16 --optim-state 4bit" "--precision bf16 --master-weights kahan" \
           "--optimizer sgd --momentum 0.9" "--precision fp16-dynamic" "--precision fp8-delayed"; do
    read -ra A <<< "$cfg"
    "$M" "${G[@]}" "${A[@]}" --steps 2 --save "$T/ok.st" > /dev/null || { fail "$cfg: the checkpoint"; continue; }
    while read -r name; do
        damage "$T/ok.st" "$T/bad.st" "$name"; rc=$?
        [ $rc -eq 3 ] && continue
        [ $rc -eq 0 ] || { fail "$cfg: damaging $name"; continue; }
        runs=$((runs + 1))
        "$M" "${G[@]}" "${A[@]}" --steps 4 --resume "$T/bad.st" > /dev/null 2> "$T/err"; rc=$?
        if [ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -qF "'$name'" "$T/err"; then ok
        else fail "$cfg: $name damaged: exit $rc, expected 1 and one line naming it: $(cat "$T/err")"; fi
    done < <(tensors "$T/ok.st")
done
echo "$runs damaged checkpoints"

# a socket as every input
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$T/sock"
"$M" "${G[@]}" --steps 1 --save "$T/g.st" > /dev/null || fail "the checkpoint"
GS="${G[*]}" # (no spaces in $T)
for args in "$GS --steps 1 --init $T/sock" "$GS --steps 3 --resume $T/sock" \
            "train --model gpt:1-2-16-16 --batch 4 --threads 1 --steps 1 --data text:$T/sock" \
            "compare --model gpt:1-2-16-16 --batch 4 --threads 1 --steps 1 --data text:$T/c.txt --init $T/sock --out $T/o" \
            "sample --from $T/sock" "sample --from $T/g.st --judge --data text:$T/sock" "underflow --from $T/sock" \
            "explore --from $T/sock --out $T/x.html"; do
    read -ra A <<< "$args"
    timeout 10 "$M" "${A[@]}" > /dev/null 2> "$T/err"; rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "sock is a socket, not a regular file" "$T/err"; then ok
    else fail "mixprec $args: exit $rc, expected 1 and one line: $(cat "$T/err")"; fi
done
[ ! -e "$T/o" ] && [ ! -e "$T/x.html" ] && ok || fail "a refused run created its output"
done_
