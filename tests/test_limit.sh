#!/bin/sh
# test_limit.sh: --memory-limit end to end. The peak RSS (VmHWM, the
# report's max_rss_bytes) stays at or under the limit at 1.0x, 0.8x and 0.6x
# of the unconstrained run's peak; the weights stay those of store-all; a
# training state that cannot fit is refused before training with the
# breakdown and the least limit; combinations with --memory-budget and
# --checkpoint. RSS checks are skipped in the sanitizer build (ASan's shadow
# memory inflates RSS): BUILD=build-asan, as `make asan` sets it.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"
case "$BUILD" in *asan*) asan=1 ;; *) asan=0 ;; esac

# an llm.c token file of 4096 ids below 50257 (header: magic, version, count)
awk 'BEGIN { srand(5); for (i = 0; i < 4096; i++) printf "%d\n", int(rand() * 50257) }' > "$T/ids"
/usr/bin/python3 -c "import struct,sys; ids=[int(x) for x in open(sys.argv[1])]; open(sys.argv[2],'wb').write(struct.pack('<256i', 20240520, 1, len(ids), *([0]*253)) + struct.pack('<%dH' % len(ids), *ids))" "$T/ids" "$T/tok.bin" 2>/dev/null || fail=$((fail + 1))

# a deep, narrow MLP: activations dominate its RSS, so 0.6x of the peak is feasible
W=32,32,32,32,32,32,32,32,32,32,32,32,32,32,32,32
M="--model mlp --widths $W,$W,$W --context 8 --batch 4096 --steps 1 --threads 1 --seed 3 --dropout 0.1"
"$R" train $M --quiet --save "$T/none.safetensors" --report "$T/none.json" || fail=$((fail + 1))
peak=$(field "$T/none.json" max_rss_bytes)
if [ $asan -eq 0 ]; then
    for pct in 100 80 60; do
        limit=$((peak * pct / 100))
        "$R" train $M --memory-limit $limit --save "$T/l.safetensors" --report "$T/l.json" > "$T/out" 2> "$T/err"
        rc=$?
        check '[ $rc -eq 0 ]' "limit $pct% ($limit): exit $rc: $(cat "$T/err")"
        rss=$(field "$T/l.json" max_rss_bytes)
        check '[ -n "$rss" ] && [ "$rss" -le "$limit" ]' "limit $pct%: peak RSS $rss over the limit $limit"
        check 'grep -q "^memory limit .*start-up .*parameters .*activations" "$T/out"' "limit $pct%: no breakdown: $(head -2 "$T/out")"
        check 'cmp -s "$T/l.safetensors" "$T/none.safetensors"' "limit $pct%: weights differ from store-all"
    done
fi

# a wide vocabulary: the head's weight gradient is a multiply of 50257 rows,
# for which OpenBLAS once packed ~50 MB no plan saw (rm_sgemm slices it)
if [ $asan -eq 0 ]; then
    V="--layers 1 --dim 64 --heads 2 --context 64 --batch 4 --vocab 50257 --steps 2 --threads 2 --val-fraction 0"
    "$R" train $V --data "$T/tok.bin" --quiet --report "$T/v.json" 2> "$T/err" || fail=$((fail + 1))
    vpeak=$(field "$T/v.json" max_rss_bytes)
    # the least limit it names (the logits dominate: store-all is near it), then that limit
    "$R" train $V --data "$T/tok.bin" --quiet --memory-limit $((vpeak / 2)) 2> "$T/err"
    least=$(sed -n 's/.*least --memory-limit that works is \([0-9.]*\)MiB.*/\1/p' "$T/err")
    limit=$(awk -v m="$least" 'BEGIN { printf "%d", m * 1048576 + 1 }')
    "$R" train $V --data "$T/tok.bin" --quiet --memory-limit $limit --report "$T/vl.json" 2> "$T/err"; rc=$?
    rss=$(field "$T/vl.json" max_rss_bytes)
    check '[ -n "$least" ] && [ $rc -eq 0 ] && [ -n "$rss" ] && [ "$rss" -le "$limit" ]' \
        "vocab 50257 at its least limit ($least MiB): exit $rc, peak RSS $rss (store-all $vpeak): $(cat "$T/err")"
fi

# --micro-batches: the second gradient buffer they sum into counts under the
# limit (a GPT whose parameters dominate: one more copy is 27 MiB); at the
# least limit named for it, the peak RSS stays under
if [ $asan -eq 0 ]; then
    P="--layers 4 --dim 384 --heads 4 --context 32 --batch 8 --steps 2 --threads 2 --micro-batches 2 --quiet"
    "$R" train $P --memory-limit 64MiB 2> "$T/err"
    least=$(sed -n 's/.*least --memory-limit that works is \([0-9.]*\)MiB.*/\1/p' "$T/err")
    check 'grep -q "gradients 5[0-9]\." "$T/err"' "--micro-batches 2: the breakdown counts one gradient copy: $(cat "$T/err")"
    limit=$(awk -v m="$least" 'BEGIN { printf "%d", m * 1048576 + 1 }')
    "$R" train $P --memory-limit $limit --report "$T/mb.json" 2> "$T/err"; rc=$?
    rss=$(field "$T/mb.json" max_rss_bytes)
    check '[ -n "$least" ] && [ $rc -eq 0 ] && [ -n "$rss" ] && [ "$rss" -le "$limit" ]' \
        "--micro-batches 2 at its least limit ($least MiB): exit $rc, peak RSS $rss: $(cat "$T/err")"
fi

# the training state alone cannot fit: refused before training, one line with the breakdown and the least limit
BIG="--model mlp --widths 8192,8192 --context 16 --batch 1 --steps 1"
"$R" train $BIG --memory-limit 1GiB > "$T/out" 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "parameters .* gradients .* optimizer" "$T/err" && grep -q "least --memory-limit that works is" "$T/err" && [ $(wc -l < "$T/err") -eq 1 ] && [ ! -s "$T/out" ]' \
    "state over the limit: exit $rc: $(cat "$T/err")"
# the least limit it names works (the library's part of it: the plan needs no more)
least=$(sed -n 's/.*least --memory-limit that works is \([0-9.]*\)MiB.*/\1/p' "$T/err")
check '[ -n "$least" ]' "no least limit in: $(cat "$T/err")"
# a limit below what the process holds before training
"$R" train $M --memory-limit 1MiB 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "before training" "$T/err"' "1MiB: exit $rc: $(cat "$T/err")"
"$R" train $M --memory-limit 50% 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "not a percentage" "$T/err"' "50%: exit $rc: $(cat "$T/err")"
"$R" train $M --memory-limit lots 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "not a size" "$T/err"' "lots: exit $rc: $(cat "$T/err")"

if [ $asan -eq 0 ]; then
    # with --memory-budget: the smaller of the two applies
    limit=$((peak * 80 / 100))
    "$R" train $M --memory-limit $limit --memory-budget 50% --report "$T/b.json" --quiet 2> "$T/err"
    check '[ $? -eq 0 ]' "limit + budget 50%: $(cat "$T/err")"
    sa=$(field "$T/b.json" store_all_bytes); arena=$(field "$T/b.json" activation_arena_bytes)
    check '[ "$arena" -le $((sa / 2)) ]' "limit + budget 50%: arena $arena over half of store-all $sa"
    # a fixed strategy: kept when it fits, refused when it does not
    "$R" train $M --memory-limit $limit --checkpoint blocks --quiet 2> "$T/err"
    check '[ $? -eq 0 ]' "limit + blocks: $(cat "$T/err")"
    "$R" train $M --memory-limit $((peak * 60 / 100)) --checkpoint none 2> "$T/err"; rc=$?
    check '[ $rc -eq 0 ]' "limit + none (none plans under a limit): exit $rc $(cat "$T/err")"
fi
echo "test_limit: $pass passed, $fail failed"
[ $fail -eq 0 ]
