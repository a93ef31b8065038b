#!/bin/sh
# test_fuzz.sh: builds the libFuzzer targets of fuzz/ with clang,
# AddressSanitizer and UBSan, and fuzzes each from its committed seed corpus
# for a bounded time. Any crash, sanitizer report, leak or timeout fails the
# test; the input that caused it is left in $BUILD/fuzz/<target>/ (crash-*,
# leak-*, timeout-*): turn it into a regression test. New inputs the fuzzer
# finds go to $BUILD/fuzz/<target>/corpus, never into the committed seeds.
# Skipped (with a message) when clang cannot build a libFuzzer binary.
#
#   target      what it parses                     seeds             seconds
#   fuzz_load   checkpoint files (safetensors)     fuzz/corpus       REMAT_FUZZ_SECONDS (25)
#   fuzz_data   llm.c token files and text data   fuzz/corpus_data  REMAT_FUZZ_SECONDS_EACH (10)
#   fuzz_chain  the chain JSON of plan --chain     fuzz/corpus_chain    "
#   fuzz_size   size strings (--memory-budget)     fuzz/corpus_size     "
#   fuzz_args   the command line (argument parser) fuzz/corpus_args     "
#   fuzz_graph  the graph JSON of plan --graph     fuzz/corpus_graph    "
#   fuzz_hfconfig  a Hugging Face config.json      fuzz/corpus_hfconfig "
BUILD=${BUILD:-build}
LOAD_SECONDS=${REMAT_FUZZ_SECONDS:-25}
EACH_SECONDS=${REMAT_FUZZ_SECONDS_EACH:-10}
CLANG=${CLANG:-clang}
out=$BUILD/fuzz
mkdir -p "$out"
pass=0; fail=0
skip() {
    echo "test_fuzz: $1; skipping the fuzz run"
    echo "test_fuzz: 0 passed, 0 failed, 1 skipped"
    exit 0
}
# the fuzzers are ASan+UBSan builds whatever $BUILD is: a second pass (make
# asan, in .ci/run) may skip them
[ -n "$REMAT_FUZZ_SKIP" ] && skip "REMAT_FUZZ_SKIP is set (the fuzzers already ran sanitized)"
command -v "$CLANG" >/dev/null 2>&1 || skip "no clang (apt-get install clang)"
# Can this clang link a fuzzer at all (libclang-rt)? Only then is a failed
# build of a target a failure of the target.
probe=$out/probe
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe.c"
"$CLANG" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >/dev/null 2>&1 ||
    skip "$CLANG cannot link -fsanitize=fuzzer (install libclang-rt-dev: clang only recommends it)"

# fuzz NAME SECONDS SEEDS MAX_LEN "SOURCES" [DICT]: builds (when a source is
# newer than the binary) and runs one target.
fuzz() {
    name=$1 secs=$2 seeds=$3 max_len=$4 srcs=$5 dict=$6
    dir=$out/$name bin=$out/$name/$name
    [ -f "$dir" ] && rm -f "$dir" # an older layout kept the binary there
    mkdir -p "$dir/corpus"
    if ! [ -x "$bin" ] || [ -n "$(find fuzz/$name.c $srcs src/*/*.h src/*/*/*.h include/remat.h cli/*.h -newer "$bin" 2>/dev/null)" ]; then
        # shellcheck disable=SC2046,SC2086
        if ! "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 \
            -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unknown-pragmas -Iinclude -Isrc -Icli \
            $(pkg-config --cflags libcjson nettle 2>/dev/null) fuzz/$name.c $srcs \
            $(pkg-config --libs libcjson nettle 2>/dev/null || echo -lcjson -lnettle) -lm -o "$bin" 2>"$dir/build.log"; then
            cat "$dir/build.log"
            echo "FAIL: $name does not build"
            fail=$((fail + 1))
            return
        fi
    fi
    echo "test_fuzz: fuzzing $name for ${secs}s"
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$bin" "$dir/corpus" "$seeds" ${dict:+-dict=$dict} \
        -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$dir/" -print_final_stats=1 > "$dir/fuzz.log" 2>&1
    rc=$?
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+ +DONE" "$dir/fuzz.log" | sed "s/^/$name: /"
    if [ $rc -ne 0 ]; then
        tail -40 "$dir/fuzz.log"
        echo "FAIL: $name found a failing input (in $dir/)"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}

fuzz fuzz_load "$LOAD_SECONDS" fuzz/corpus 8192 \
    "src/train/safetensors.c src/train/st_write.c src/train/checksum.c src/train/params.c src/train/narrow.c src/train/optim.c src/dist/comm.c src/util/util.c src/exec/errors.c src/exec/ref.c src/util/jsonerr.c src/exec/pagestate.c src/util/scratch.c src/exec/options.c src/graph/graph.c" \
    fuzz/safetensors.dict
fuzz fuzz_data "$EACH_SECONDS" fuzz/corpus_data 4096 "src/train/data.c src/util/philox.c src/util/util.c"
fuzz fuzz_chain "$EACH_SECONDS" fuzz/corpus_chain 600 "src/plan/chain/chainfile.c src/plan/rotor/rotor.c src/plan/rotor/rotor_dp.c src/plan/rotor/rotor_least.c src/util/util.c src/util/jsonerr.c" \
    fuzz/chain.dict
fuzz fuzz_size "$EACH_SECONDS" fuzz/corpus_size 64 "src/util/util.c"
fuzz fuzz_args "$EACH_SECONDS" fuzz/corpus_args 1024 \
    "cli/args.c cli/guard.c" fuzz/args.dict
fuzz fuzz_hfconfig "$EACH_SECONDS" fuzz/corpus_hfconfig 2048 "src/train/hfconfig.c src/train/safetensors.c src/util/util.c src/util/jsonerr.c"
fuzz fuzz_graph "$EACH_SECONDS" fuzz/corpus_graph 2048 \
    "src/plan/graphplan/graphfile.c src/plan/graphplan/graphplan.c src/plan/graphplan/graphsched.c src/plan/graphplan/graphfast.c src/plan/graphplan/blocks.c src/plan/schedule.c src/util/jsonerr.c src/plan/graphplan/graphpage.c"
echo "test_fuzz: $pass passed, $fail failed"
[ $fail -eq 0 ]
