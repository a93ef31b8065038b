/* fuzz_args.c: a libFuzzer target for the command line: the input, split
 * at NUL bytes, is the argument vector of `remat train` (or `plan`/`sample`:
 * the first byte picks), parsed by cli_args_parse (cli/args.c) and checked
 * by cli_check_flag_use (cli/guard.c), as main.c does. A parse must either
 * succeed with values in their documented ranges or fail with exit status 2;
 * it never reads past an argument. Its usage errors are silenced here.
 * Built and run by tests/test_fuzz.sh; by hand:
 *   build/fuzz/fuzz_args/fuzz_args -dict=fuzz/args.dict fuzz/corpus_args */
#include "args.h"
#include "guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ARGS = 64 };

/* One process: cli/dist.c (Open MPI, the library's threads) stays out of
 * this target; check_batch asks it the number of ranks. */
int cli_dist_size(void) { return 1; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the parser's usage errors go to a null stream; fd 2 stays open for
     * the sanitizers' reports (glibc's stderr is an assignable FILE *) */
    static FILE *null_stream;
    if (!null_stream && (null_stream = fopen("/dev/null", "w")) != NULL) stderr = null_stream;
    if (size < 1 || size > 4096) return 0;
    static const char *const commands[] = {"train", "plan", "sample"};
    /* every argument its own allocation, so ASan sees a read past its end */
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    size_t start = 1;
    for (size_t i = 1; i <= size && argc < MAX_ARGS; i++)
        if (i == size || data[i] == 0) {
            argv[argc] = malloc(i - start + 1);
            if (!argv[argc]) break;
            memcpy(argv[argc], data + start, i - start);
            argv[argc++][i - start] = 0;
            start = i + 1;
        }
    cli_args a;
    cli_args_default(&a);
    a.command = commands[data[0] % 3];
    if (cli_args_parse(&a, argc, argv, 0) && !a.help) {
        if (a.layers < 1 || a.layers > 4096 || a.dim < 1 || a.heads < 1 || a.context < 1 || a.vocab < 2 ||
            a.batch < 1 || a.n_widths < 1 || a.n_widths >= RM_MLP_MAX_LAYERS || !(a.dropout >= 0) ||
            !(a.lr >= 0) || a.steps < 0)
            abort(); /* a value outside its flag's range was accepted */
        for (int i = 0; i < a.n_widths; i++)
            if (a.widths[i] < 1) abort();
        (void)cli_check_flag_use(&a);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
