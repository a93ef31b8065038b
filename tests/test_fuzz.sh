#!/bin/sh
# test_fuzz.sh: builds the libFuzzer target fuzz/fuzz_load.c (the
# checkpoint-file loader: parser, checksum, loading into a session) with
# clang, AddressSanitizer and UBSan, and fuzzes it for REMAT_FUZZ_SECONDS
# (default 25) from the seed corpus fuzz/corpus/. Any crash, sanitizer
# report, leak or timeout fails the test; the input that caused it is left
# in $BUILD/fuzz/ (crash-*, leak-*, timeout-*). New inputs the fuzzer finds
# go to $BUILD/fuzz/corpus, never into the committed seeds. Skipped (with a
# message) when clang cannot build a libFuzzer binary.
BUILD=${BUILD:-build}
SECONDS_TO_FUZZ=${REMAT_FUZZ_SECONDS:-25}
CLANG=${CLANG:-clang}
out=$BUILD/fuzz
bin=$out/fuzz_load
mkdir -p "$out/corpus"
skip() {
    echo "test_fuzz: $1; skipping the fuzz run"
    echo "test_fuzz: 0 passed, 0 failed, 1 skipped"
    exit 0
}
command -v "$CLANG" >/dev/null 2>&1 || skip "no clang (apt-get install clang)"
# Can this clang link a fuzzer at all (libclang-rt)? Only then is a failed
# build of the target a failure of the target.
probe=$out/probe
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe.c"
"$CLANG" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >/dev/null 2>&1 ||
    skip "$CLANG cannot link -fsanitize=fuzzer (install libclang-rt-dev: clang only recommends it)"

srcs="fuzz/fuzz_load.c src/train/safetensors.c src/train/st_write.c src/train/checksum.c src/train/params.c src/train/optim.c src/util/util.c src/exec/errors.c"
if ! [ -x "$bin" ] || [ -n "$(find $srcs src/*/*.h include/remat.h -newer "$bin" 2>/dev/null)" ]; then
    # shellcheck disable=SC2046
    if ! "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 \
        -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unknown-pragmas -Iinclude -Isrc \
        $(pkg-config --cflags libcjson nettle 2>/dev/null) $srcs \
        $(pkg-config --libs libcjson nettle 2>/dev/null || echo -lcjson -lnettle) -lm -o "$bin" 2>"$out/build.log"; then
        cat "$out/build.log"
        echo "test_fuzz: 0 passed, 1 failed"
        exit 1
    fi
fi
echo "test_fuzz: fuzzing the loader for ${SECONDS_TO_FUZZ}s"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$bin" "$out/corpus" fuzz/corpus \
    -dict=fuzz/safetensors.dict -max_total_time="$SECONDS_TO_FUZZ" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$out/" -print_final_stats=1 > "$out/fuzz.log" 2>&1
rc=$?
grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+ +DONE" "$out/fuzz.log"
if [ $rc -ne 0 ]; then
    tail -40 "$out/fuzz.log"
    echo "test_fuzz: 0 passed, 1 failed"
    exit 1
fi
echo "test_fuzz: 1 passed, 0 failed"
