#!/bin/sh
# test_fuse.sh: `remat train --fuse-optimizer` end to end. The checkpoint
# files of fused and unfused runs are byte for byte the same (AdamW and SGD,
# dropout on, a strategy, a budget, GPT and U-ViT); a fused run resumed from
# its file continues exactly; the report counts no flat gradients and the
# peak RSS drops by about their bytes (not in the sanitizer build: ASan
# inflates RSS); what fusion cannot combine with is refused with exit 2 and
# one line saying what to do.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"
case "$BUILD" in *asan*) asan=1 ;; *) asan=0 ;; esac

G="--layers 2 --dim 64 --heads 2 --context 32 --batch 4 --steps 5 --grad-clip 0 --dropout 0.1 --threads 2 --quiet"
n=0
for cfg in "" "--optimizer sgd --checkpoint blocks" "--memory-budget 75%" "--model uvit --layers 4 --checkpoint sqrt" \
           "--model uvit --layers 4 --optimizer sgd --memory-budget 70%"; do
    n=$((n + 1))
    "$R" train $G $cfg --save "$T/u$n.safetensors" 2> "$T/err" || bad "unfused $cfg: $(cat "$T/err")"
    "$R" train $G $cfg --fuse-optimizer --save "$T/f$n.safetensors" 2> "$T/err" || bad "fused $cfg: $(cat "$T/err")"
    check 'cmp -s "$T/u$n.safetensors" "$T/f$n.safetensors"' "'$cfg': the fused checkpoint file differs from the unfused one"
done

# resumed: 3 fused steps, then 2 more from the file, equal 5 fused steps
"$R" train $G --steps 3 --fuse-optimizer --save "$T/r.safetensors" 2> "$T/err" || bad "first part: $(cat "$T/err")"
"$R" train --resume "$T/r.safetensors" --steps 5 --fuse-optimizer --quiet --save "$T/r.safetensors" 2> "$T/err" ||
    bad "resume: $(cat "$T/err")"
check 'cmp -s "$T/r.safetensors" "$T/f1.safetensors"' "a fused run resumed at step 3 differs from 5 fused steps"

# the report: no flat gradients; the arena holds them at their peak; RSS drops
P="--layers 4 --dim 256 --heads 4 --context 16 --batch 2 --steps 2 --grad-clip 0 --threads 2 --quiet"
"$R" train $P --report "$T/u.json" 2> "$T/err" || bad "unfused report: $(cat "$T/err")"
"$R" train $P --fuse-optimizer --report "$T/f.json" 2> "$T/err" || bad "fused report: $(cat "$T/err")"
gu=$(field "$T/u.json" grad_bytes); gf=$(field "$T/f.json" grad_bytes); ga=$(field "$T/f.json" grad_arena_bytes)
pu=$(field "$T/u.json" activation_bytes_planned); pf=$(field "$T/f.json" activation_bytes_planned)
check 'grep -q "\"fuse_optimizer\": true" "$T/f.json" && [ "$gf" -eq 0 ] && [ "$gu" -gt 0 ]' "grad_bytes: fused $gf, unfused $gu"
check '[ "$pf" -ge "$pu" ] && [ "$pf" -le $((pu + ga)) ]' "planned: fused $pf, unfused $pu, gradients at the fused peak $ga"
if [ $asan -eq 0 ]; then
    ru=$(field "$T/u.json" max_rss_bytes); rf=$(field "$T/f.json" max_rss_bytes)
    check '[ $((ru - rf)) -ge $(((gu - ga) * 8 / 10)) ]' "peak RSS: fused $rf, unfused $ru: not $(((gu - ga) * 8 / 10)) bytes less"
fi

# refusals: exit 2, one line, nothing on stdout
refused() { # flags, what the message must say
    want=$2
    "$R" train --steps 1 --quiet $1 > "$T/out" 2> "$T/err"; rc=$?
    check '[ $rc -eq 2 ] && [ $(wc -l < "$T/err") -eq 1 ] && grep -q -- "$want" "$T/err" && [ ! -s "$T/out" ]' \
        "'$1': exit $rc: $(cat "$T/err")"
}
refused "--fuse-optimizer" "add --grad-clip 0"
refused "--fuse-optimizer --grad-clip 0.5" "add --grad-clip 0"
refused "--fuse-optimizer --grad-clip 0 --micro-batches 2" "cannot be combined"
# a resumed run takes --grad-clip from its file: the clipping default refuses too
"$R" train $G --steps 1 --grad-clip 1 --save "$T/c.safetensors" 2> "$T/err" || bad "clip run: $(cat "$T/err")"
refused "--resume $T/c.safetensors --steps 2 --fuse-optimizer" "add --grad-clip 0"
if command -v mpirun > /dev/null 2>&1 && ldd "$R" 2> /dev/null | grep -q libmpi; then
    # several ranks work (tests/test_mpi.sh compares them); sharding with it is refused.
    # The ranks agree on the refusal and end with MPI_Finalize: LeakSanitizer
    # would report Open MPI's own allocations (as in test_mpi.sh)
    nm "$R" 2>/dev/null | grep -q __asan_init && ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 && export ASAN_OPTIONS
    timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 2 "$R" train --steps 1 --quiet \
        --fuse-optimizer --grad-clip 0 --threads 1 --shard-optimizer > "$T/out" 2> "$T/err"; rc=$?
    check '[ $rc -eq 2 ] && grep -q "shard-optimizer cannot be combined" "$T/err"' "mpirun -np 2 --shard-optimizer: exit $rc: $(cat "$T/err")"
fi
check '"$R" train --help | grep -q -- "--fuse-optimizer"' "--help names --fuse-optimizer"

echo "test_fuse.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
