#!/usr/bin/env bash
# test_explore.sh - `mixprec underflow`, `tour` and `explore`: the CLI's counts
# against counts computed here from fp16's thresholds, the tour's live numbers,
# and the interactive page in headless Chromium (slider positions set through
# the URL, the page's readout read back from its DOM; a screenshot is kept;
# RENDER=0, as in the sanitizer build, leaves Chromium out).
. "$(dirname "$0")/lib.sh"

# 1. counts from a file of float32 values, against thresholds: in fp16 a value v
# becomes 0 when v <= 2^-25 (the tie goes to the even 0), is subnormal when
# 2^-25 < v < 1023.5 * 2^-24, overflows when v >= 65520.
python3 - "$T/g.f32" <<'PY'
import random, struct, sys
r = random.Random(5)
vals = [2.0**-26, 2.0**-25, 2.0**-25 * (1 + 2**-20), 2.0**-24, 1023.5 * 2.0**-24, 1023.49 * 2.0**-24, 2.0**-14,
        65504.0, 65519.0, 65520.0, 1e5, 0.0]
vals += [r.lognormvariate(-17.5, 1.6) for _ in range(5000)] + [r.lognormvariate(-3, 3) for _ in range(3000)]
vals = [struct.unpack("<f", struct.pack("<f", v))[0] for v in vals]  # as float32
open(sys.argv[1], "wb").write(struct.pack("<%df" % len(vals), *vals))
PY
out=$("$M" underflow --from "$T/g.f32" --raw --scales 1,256,65536,1048576 --json) && ok || fail "underflow --from"
if printf '%s' "$out" | python3 -c '
import json, struct, sys
d = json.load(sys.stdin)
raw = open(sys.argv[1], "rb").read()
xs = [abs(v) for v in struct.unpack("<%df" % (len(raw) // 4), raw)]
n = len(xs)
assert d["n"] == n and d["format"] == "fp16", d["n"]
for s in d["scales"]:
    k = s["scale"]
    vs = [x * k for x in xs]
    zero = sum(v <= 2.0**-25 for v in vs)
    over = sum(v >= 65520.0 for v in vs)
    sub = sum(2.0**-25 < v < 1023.5 * 2.0**-24 for v in vs)
    got = [round(s["zero"] * n), round(s["overflow"] * n), round(s["subnormal"] * n), round(s["survive"] * n)]
    assert got == [zero, over, sub, n - zero - over], (k, got, [zero, over, sub, n - zero - over])
assert d["zero_count"] == sum(x <= 2.0**-25 for x in xs)
med = sorted(xs)[n // 2]
assert abs(d["median"] - med) / med < 1e-3, (d["median"], med)
' "$T/g.f32"; then ok; else fail "underflow counts differ from the thresholds"; fi
"$M" underflow --from "$T/g.f32" --raw --format e4m3 --scales 1 > "$T/u.txt" && grep -q 'e4m3 smallest subnormal' "$T/u.txt" && ok || fail "e4m3 histogram marks"
"$M" underflow > "$T/u2.txt" && grep -q '^  5[0-9]\.[0-9][0-9]% become exactly zero in fp16' "$T/u2.txt" && ok || fail "default distribution: about 54% lost"
grep -qE 'best power-of-two scale: [0-9.e+]+ \(2\^2[0-3]\): 100.00% survive' "$T/u2.txt" && ok || fail "best scale"
"$M" underflow --dist gauss:1,2 > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "bad --dist"
"$M" underflow --dist lognormal:80,20 > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "--dist beyond fp32's range"
# scaled values beyond fp32's own range count as overflow: P(|g| > FLT_MAX / 3e38 = 1.134) is about 10%
"$M" underflow --format bf16 --dist lognormal:0,0.1 --n 20000 --scales 3e38 --json | python3 -c '
import json, sys; s = json.load(sys.stdin)["scales"][0]; assert 0.08 < s["overflow"] < 0.13 and abs(s["survive"] + s["overflow"] - 1) < 1e-9, s' && ok || fail "overflow past fp32"
# files numpy writes are read: float64, 2-D float16, 0-d, and two arrays saved into one file (np.load reads the first)
/usr/bin/python3 - "$T" <<'PY'  # Debian's, with python3-numpy
import numpy as np, sys
t = sys.argv[1]
np.save(t + "/f8.npy", np.array([1e-9, -2.0, 3e5, np.inf], np.float64))
np.save(t + "/f2.npy", np.array([[1e-7, 2.0], [-65504.0, 0.5]], np.float16))
np.save(t + "/scalar.npy", np.float32(0.25))
with open(t + "/two.npy", "wb") as f:
    np.save(f, np.array([1.0, 2.0, 4.0], np.float32))
    np.save(f, np.array([8.0], np.float32))
g = np.array([1e-3, 2e-5, 3.0, -4e-7, 6e-8], np.float32)  # big-endian files: the same values as little-endian
for d in ("f2", "f4", "f8"):
    np.save(t + "/le_" + d + ".npy", g.astype("<" + d)), np.save(t + "/be_" + d + ".npy", g.astype(">" + d))
PY
for c in f8:3 f2:4 scalar:1 two:3; do
    n=$("$M" underflow --from "$T/${c%%:*}.npy" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["n"])') &&
        [ "$n" = "${c#*:}" ] && ok || fail "${c%%:*}.npy: $n values read, ${c#*:} expected"
done
for d in f2 f4 f8; do
    [ "$("$M" underflow --from "$T/be_$d.npy" --json)" = "$("$M" underflow --from "$T/le_$d.npy" --json)" ] && ok ||
        fail "a big-endian .npy ('>$d') read otherwise than the little-endian one"
done
# .npy headers read as numpy reads them: a Fortran-order array is read (the same values, in another order);
# a key given twice, an unknown or missing key, an object or structured dtype is refused by name, no stray quote
/usr/bin/python3 - "$T" <<'PY'
import numpy as np, sys
t = sys.argv[1]
np.save(t + "/fortran.npy", np.asfortranarray(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)))
np.save(t + "/object.npy", np.array([1.0, "x"], dtype=object), allow_pickle=True)
def raw(name, header, body=np.array([1.0, 2.0], np.float32).tobytes()):
    h = header.encode("latin1")
    h += b" " * ((64 - (10 + len(h) + 1) % 64) % 64) + b"\n"
    open(t + "/" + name, "wb").write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + body)
raw("dup.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), 'descr': '<f4', }")
raw("extra.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'align': True, }")
raw("noshape.npy", "{'descr': '<f4', 'fortran_order': False, }")
raw("struct.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }")
raw("dq.npy", '{"descr": "<f4", "fortran_order": False, "shape": (2,)}')
assert np.load(t + "/fortran.npy").flags.f_contiguous and np.load(t + "/dq.npy").tolist() == [1.0, 2.0]
PY
n=$("$M" underflow --from "$T/fortran.npy" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["n"])') &&
    [ "$n" = 6 ] && ok || fail "fortran.npy: $n values read, 6 expected"
n=$("$M" underflow --from "$T/dq.npy" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["n"])') &&
    [ "$n" = 2 ] && ok || fail "dq.npy (double quotes): $n values read, 2 expected"
for c in "dup:the header gives 'descr' twice" "extra:the header has the key 'align'" "noshape:the header has no 'shape'" \
         "struct:'descr' is a structured dtype" "object:.npy dtype '\|O' is Python objects"; do
    "$M" underflow --from "$T/${c%%:*}.npy" > /dev/null 2>"$T/e"; rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l < "$T/e")" -eq 1 ] && grep -qE -- "${c%%:*}.npy: .*${c#*:}" "$T/e" && ok ||
        fail "${c%%:*}.npy: exit $rc, expected one line /${c#*:}/: $(cat "$T/e")"
done
[ $(($(tr -cd "'" < "$T/e" | wc -c) % 2)) -eq 0 ] && ok || fail "an odd number of quotes (a stray one) in: $(cat "$T/e")"
printf '\x93NUMPY\x02\x00\x00\x00' > "$T/short.npy"
"$M" underflow --from "$T/short.npy" > /dev/null 2>&1; [ $? -eq 1 ] && ok || fail "short .npy v2 header"
"$M" underflow --from "$T/missing.npy" > /dev/null 2>"$T/e"; [ $? -eq 1 ] && grep -q 'missing.npy' "$T/e" && ok || fail "missing file"
# a file name is user input: the page shows it escaped, never as markup
cp "$T/g.f32" "$T/<script>x'\"&.f32"
"$M" explore --from "$T/<script>x'\"&.f32" --raw --out "$T/esc.html" > /dev/null && ok || fail "explore --from <script>..."
grep -qF "&lt;script&gt;x&#39;&quot;&amp;.f32" "$T/esc.html" && ! grep -qF "<script>x" "$T/esc.html" && ok ||
    fail "the file name is not escaped in the page"
printf 'abc' > "$T/odd.f32"
"$M" underflow --from "$T/odd.f32" --raw > /dev/null 2>&1; [ $? -eq 1 ] && ok || fail "3-byte file"
# a file's format is what its bytes say: raw float32 only with --raw; a damaged .npy or safetensors is an error
"$M" underflow --from "$T/g.f32" > /dev/null 2>"$T/e"; [ $? -eq 1 ] && grep -q 'g.f32: neither .npy nor safetensors' "$T/e" && ok ||
    fail "raw float32 without --raw"
cp "$T/f2.npy" "$T/bad.npy" && printf 'X' | dd of="$T/bad.npy" bs=1 seek=1 conv=notrunc 2>/dev/null
"$M" underflow --from "$T/bad.npy" > /dev/null 2>"$T/e"; [ $? -eq 1 ] && grep -q 'bad.npy: neither' "$T/e" && ok || fail "damaged .npy magic"
"$M" underflow --raw > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "--raw without --from"
"$M" underflow --from "$T" > /dev/null 2>"$T/e"; [ $? -eq 1 ] && grep -q 'not a regular file' "$T/e" && ok || fail "a directory as --from"

# real gradients: dumped by mixprec train, read back by underflow
"$M" train --model mlp:784-32-10 --steps 3 --batch 64 --dump-grads "$T/grads.safetensors" > /dev/null && ok || fail "--dump-grads"
out=$("$M" underflow --from "$T/grads.safetensors" --json) && ok || fail "underflow --from safetensors"
cp "$T/grads.safetensors" "$T/grads.bin" # the format by the bytes, whatever the name
n2=$("$M" underflow --from "$T/grads.bin" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["n"])') &&
    [ "$n2" = $((784 * 32 + 32 * 10)) ] && ok || fail "safetensors named .bin: $n2"
printf '%s' "$out" | python3 -c 'import json,sys; d = json.load(sys.stdin); assert d["n"] == 784 * 32 + 32 * 10, d["n"]' && ok || fail "gradient count"

# 2. the tour's numbers, computed live
"$M" tour > "$T/tour.txt" && ok || fail "tour"
grep -q 'in fp16: 1024.0000   in fp32: 1049.6016' "$T/tour.txt" && ok || fail "accumulation numbers"
grep -q '(the same bits)' "$T/tour.txt" && ok || fail "power-of-two scaling exact"
grep -q 'inf in the gradients: step skipped, scale halved' "$T/tour.txt" && ok || fail "dynamic scaler skips"
grep -q '0.00% become zero in bf16' "$T/tour.txt" && ok || fail "bf16 step"
[ "$("$M" tour --step 5 | grep -c '^[0-9]\.')" -eq 1 ] && ok || fail "--step shows one step"
"$M" tour --step 7 > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "--step 7"

# 3. the page: same data as underflow, read back through Chromium
A=(--dist lognormal:-12,2 --n 20000 --seed 3)
"$M" explore --out "$T/x.html" "${A[@]}" > /dev/null && ok || fail "explore"
ref=$("$M" underflow "${A[@]}" --scales 1,16777216 --json)
zero1=$(printf '%s' "$ref" | python3 -c 'import json,sys; print(json.load(sys.stdin)["zero_count"])')
if [ "${RENDER:-1}" = 0 ]; then
    echo "rendering in Chromium: left to the plain build's run (the pages are the same)"
elif command -v chromium > /dev/null; then
    dom() { timeout 120 chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 --dump-dom "file://$T/x.html#$1" 2>>"$T/console.txt"; }
    d0=$(dom 'k=0&fmt=fp16')
    z=$(printf '%s' "$d0" | grep -o 'id="zero">[0-9]*' | grep -o '[0-9]*$')
    [ -n "$z" ] && [ "$z" = "$zero1" ] && ok || fail "page at 2^0 shows $z zeros, underflow says $zero1"
    d24=$(dom 'k=24&fmt=fp16')
    o=$(printf '%s' "$d24" | grep -o 'id="over">[0-9]*' | grep -o '[0-9]*$')
    [ -n "$o" ] && [ "$o" -gt 0 ] && ok || fail "page at 2^24 shows no overflow ($o)"
    printf '%s' "$d24" | grep -q '2^24 = 16777216' && ok || fail "scale label"
    de=$(dom 'k=10&fmt=e4m3')
    printf '%s' "$de" | grep -q 'e4m3 max 4.48e+2' && ok || fail "format selector"
    if grep -E 'CONSOLE|Uncaught|Error:' "$T/console.txt" | grep -v 'dbus\|DBus\|gpu\|GPU'; then fail "console errors"; else ok; fi
    timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,800 \
        --screenshot="$T/x.png" "file://$T/x.html#k=12&fmt=fp16" > /dev/null 2>&1
    [ -s "$T/x.png" ] && ok || fail "no screenshot"
    mkdir -p "${SCREENSHOT_DIR:-.}" && cp "$T/x.png" "${SCREENSHOT_DIR:-.}/explore-screenshot.png"
else
    fail "chromium is not installed (scripts/deps.sh installs it)"
fi
"$M" explore > /dev/null 2>&1; [ $? -eq 2 ] && ok || fail "explore without --out"
done_
