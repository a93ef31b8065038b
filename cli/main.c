/* main.c: the remat command line. Subcommands: train, sample, eval, inspect, plan, bench, export.
 * `remat COMMAND --help` prints that command's flags and exits 0.
 * Exit status: 0 success, 1 runtime error, 2 usage error. */
#include "args.h"
#include "stop.h"
#include <stdio.h>
#include <string.h>

int cli_train(const cli_args *a);
int cli_sample(const cli_args *a);
int cli_eval(const cli_args *a);
int cli_inspect(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_bench(int argc, char **argv, const char *argv0);
int cli_export(const cli_args *a);

static int run(int argc, char **argv) {
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        cli_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("remat %s\n", rm_version());
        return 0;
    }
    /* train and bench stop cleanly on a signal (stop.h); the others end as the signal says */
    if (strcmp(argv[1], "train") && strcmp(argv[1], "bench")) cli_stop_default();
    cli_args a;
    cli_args_default(&a);
    a.command = argv[1];
    if (!strcmp(argv[1], "train") || !strcmp(argv[1], "sample") || !strcmp(argv[1], "eval") ||
        !strcmp(argv[1], "export")) {
        if (!cli_args_parse(&a, argc, argv, 2)) return 2;
        if (a.help) return cli_help(argv[1]);
        return !strcmp(argv[1], "train")    ? cli_train(&a)
               : !strcmp(argv[1], "sample") ? cli_sample(&a)
               : !strcmp(argv[1], "eval")   ? cli_eval(&a)
                                            : cli_export(&a);
    }
    if (!strcmp(argv[1], "inspect")) return cli_inspect(argc - 2, argv + 2);
    if (!strcmp(argv[1], "plan")) return cli_plan(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench")) return cli_bench(argc - 2, argv + 2, argv[0]);
    return cli_fail(2, "unknown command '%s' (commands: train, sample, eval, inspect, plan, bench, export; see remat "
                    "--help)", argv[1]);
}

/* Under mpirun every rank runs the command; see dist.c. The stop signals
 * are caught before MPI starts: a signal during the start-up is a request
 * to stop like any other, not a death without a word. */
int main(int argc, char **argv) {
    cli_wait_policy(argv);
    cli_stop_catch(1);
    cli_dist_init(&argc, &argv);
    return cli_dist_finish(run(argc, argv));
}
