/* args.h: the command-line flags of remat, parsed into one struct. */
#ifndef REMAT_CLI_ARGS_H
#define REMAT_CLI_ARGS_H
#include "remat.h"
#include <limits.h>
#include <stdio.h>

typedef struct cli_args {
    /* model */
    const char *model;          /* gpt | mlp | llama | uvit | encdec */
    int layers, dim, heads, context, vocab, batch;
    int ffn_dim;                /* llama (0: 8/3 dim rounded up to 64) */
    int kv_heads;               /* llama: key/value heads (0: --heads) */
    float rope_theta, norm_eps; /* llama (0: 10000, 1e-6) */
    int tie_embeddings;         /* llama: the head is embed_tokens */
    int enc_layers, dec_layers; /* encdec */
    int vocab_set;
    int n_widths, widths[RM_MLP_MAX_LAYERS];
    float dropout;
    /* fine-tuning: comma-separated globs on parameter names (rm_freeze_params) */
    const char *freeze, *train_only;
    int lora_rank;              /* --lora R (0: none); --lora-alpha, --lora-dropout, --lora-targets */
    float lora_alpha, lora_dropout;
    const char *lora_targets;
    const char *save_adapters;  /* train: the PEFT adapter folder written at the end */
    /* export: --out FILE (with --merge-lora), --adapters DIR, --base-model NAME */
    const char *out, *adapters, *base_model;
    int merge_lora;
    int new_in_model_folder;    /* --allow-output-in-model-folder: new outputs may go into a model folder read */
    /* data */
    const char *data;
    int token_bytes;            /* --token-bytes 2|4 (0: llm.c header or bytes) */
    const char *frozen_dtype;   /* --frozen-dtype auto|f32|bf16|f16: how frozen weights are kept (cli/hf.c) */
    int max_batches;            /* eval: at most this many batches (0: all) */
    float val_fraction;
    const char *sampler;        /* random | sequential */
    /* training */
    int steps, threads, eval_every, warmup;
    uint64_t seed;
    const char *optimizer;      /* adamw | sgd */
    float lr, weight_decay, grad_clip;
    float beta1, beta2, adam_eps; /* AdamW's betas and eps */
    const char *lr_schedule;    /* constant | cosine */
    const char *checkpoint;     /* recompute strategy */
    const char *precision;      /* fp32 | bf16 (rm_options.precision) */
    const char *memory_budget;  /* "64MiB", "50%": plan to fit (NULL: none) */
    const char *memory_limit;   /* "2GiB": the process's peak RSS (NULL: none; cli/limit.c) */
    const char *scratch;        /* --scratch DIR: page to an anonymous file there (issue 20; NULL: none) */
    const char *scratch_bandwidth; /* --scratch-bandwidth 2GB/s: the plan's bandwidth (NULL: measured) */
    const char *page;           /* --page activations,moments,params: forced paging (NULL: the plan's) */
    const char *init, *save, *report, *load;
    const char *resume;         /* checkpoint file to continue from */
    int save_every, keep;       /* step files every N steps; keep the last K (0: all) */
    const char *trace;          /* --trace FILE.json: one step in the Chrome Trace Event Format */
    int trace_step;             /* --trace-step N: which step (1-based; 0: the second) */
    int quiet, verify_recompute, print_plan, batchnorm;
    int shard_optimizer;
    int no_overlap;             /* reduce the gradients after the backward, blocking (for comparison) */
    int fuse_optimizer;         /* the optimizer inside the backward pass (rm_options.fuse_optimizer) */
    int micro_batches;          /* gradient accumulation: the batch as K micro-batches (one process) */        /* ZeRO-1 under mpirun: AdamW moments split over the ranks */
    /* sample */
    const char *prompt;
    const char *source;         /* encdec: the text to decode a target for */
    int tokens, top_k;
    float temperature;
    /* the flags given on the command line, so a resumed run can tell them
     * from defaults (the file's values replace defaults, not given flags) */
    const char *command;        /* "train", "sample", "plan" (for messages) */
    int help;                   /* --help was given: print the command's flags */
    int n_given;
    char given[64][64];
    const char *given_value[64]; /* the text each was given (NULL for a boolean flag) */
} cli_args;

void cli_args_default(cli_args *a);
/* Every comma-separated list of the command line (--widths, --adam-betas,
 * bench's --strategies; --freeze, --train-only and --lora-targets checked
 * with l NULL, nothing stored) is split here, once, with bounds: 1 to `max`
 * items, none empty (no comma first, last or twice), none with white space,
 * each shorter than CLI_ITEM_MAX when stored. Else a usage error (exit 2)
 * naming flag, with `example`, and 0. */
enum { CLI_LIST_MAX = RM_MLP_MAX_LAYERS, CLI_ITEM_MAX = 48 };
typedef struct cli_list {
    int n;
    char item[CLI_LIST_MAX][CLI_ITEM_MAX];
} cli_list;
int cli_parse_list(const char *flag, const char *s, int max, const char *example, cli_list *l);
/* cli_parse_list for a list of names, a set (--strategies, --freeze,
 * --train-only, --lora-targets, --page): no item twice either. Sequences
 * (--widths, --adam-betas) may repeat a value. */
int cli_parse_set(const char *flag, const char *s, int max, const char *example, cli_list *l);
/* A flag given twice with two values: the last is used, as in most
 * tools (a script's defaults, then an override), and a warning names both
 * so that the first is not dropped silently. *seen holds the value before
 * (NULL: none) and becomes `value`. */
void cli_once(const char *flag, const char **seen, const char *value);
/* A number of the command line, from lo to hi: decimal, with no white
 * space around or inside it (' 4' and '4 ' alike). Else a usage error
 * (exit 2) naming flag, and 0. */
int cli_parse_int(const char *flag, const char *s, int lo, int hi, int *out);
int cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out);
/* Whether `flag` ("--lr") was given. */
int cli_given(const cli_args *a, const char *flag);
/* Parses argv[first..argc) and checks that the model flags fit --model; on
 * a bad flag prints one line and returns 0.
 * --help (or -h) stops the parse with a->help set. */
int cli_args_parse(cli_args *a, int argc, char **argv, int first);
/* Whether `command` ("plan") uses `flag` ("--layers") at all (args.c's table). */
int cli_flag_applies(const char *flag, const char *command);
/* A subcommand's own flags (plan's, bench's), taken out of argv before the
 * common parse. If argv[*i] is one of the NULL-terminated with_value
 * ("--csv FILE" or "--csv=FILE") or alone ("--json"): returns 1 with *name
 * and *value (NULL for one alone), *i past a separate value; 0 if it is
 * none of them; -1 after a usage error (a missing value, a value given to
 * a flag that takes none). */
int cli_own_flag(int argc, char **argv, int *i, const char *const *with_value, const char *const *alone,
                 const char *command, const char **name, const char **value);
/* help.c: `remat COMMAND --help` prints its flags on stdout; 0, or 2 if
 * unknown. cli_usage: `remat --help`, the commands and the common flags. */
int cli_help(const char *command);
void cli_usage(FILE *f);
/* "error: ..." on stderr; returns the exit status (1 runtime, 2 usage).
 * Under mpirun with several ranks the message names the rank (cli_fail_rank >= 0). */
int cli_fail(int status, const char *fmt, ...);
/* Prints "remat: <kind>: <message>" (kind "note" or "warning") on stderr as one line, as
 * cli_fail does: a control character a path or a file brought in is shown as '?'. */
void cli_notice(const char *kind, const char *fmt, ...);
extern int cli_fail_rank;

/* dist.c: MPI under mpirun (nothing otherwise): start, rank and ranks,
 * threads per rank, the session told MPI_COMM_WORLD, and the end (a
 * failure on any rank aborts the job with its exit status). */
void cli_dist_init(int *argc, char ***argv);
/* waitpolicy.c: GOMP_SPINCOUNT=10000 unless the user set a wait policy (re-executes the command once) */
void cli_wait_policy(char **argv);
int cli_dist_rank(void);
int cli_dist_size(void);
int cli_dist_threads(void);
rm_status cli_dist_attach(rm_session *s, int flags);
int cli_dist_finish(int rc);
/* Collective: the largest `value` over the ranks (a stop signal any rank
 * received), and rank 0's `value` (the outcome of its save) on every rank.
 * One process: value itself. */
int cli_dist_any(int value);
int cli_dist_from_rank0(int value);
/* Collective: every rank's n doubles, rank by rank, into all (n x ranks). */
void cli_dist_allgather(const double *mine, int n, double *all);
/* The ranks agreed on the exit status: cli_dist_finish ends with
 * MPI_Finalize on every rank, not MPI_Abort. */
void cli_dist_agreed(void);
/* A flag of the configuration and its effective value, as text. */
typedef struct cli_config_item {
    const char *name;
    char value[PATH_MAX + 32]; /* the digest covers it whole; messages show its start */
} cli_config_item;
/* Collective, at start-up: the ranks compare a digest of each item; on a
 * mismatch rank 0 names the first flag that differs and each value's ranks,
 * and every rank returns 2 (agreed). 0 when all match (or one process). */
int cli_dist_check_config(const cli_config_item *items, int n);
/* digest.c: what this rank's files hold, as text for the digest: the data
 * it loaded (its size and a digest of its tokens or pairs), and a --init or
 * --resume file (its remat_checksum and step, else its size and a digest of
 * sampled bytes; path NULL: "(none)"). */
typedef struct cli_run_identity {
    char data[96], init[160], resume[160];
} cli_run_identity;
void cli_data_identity(const rm_dataset *d, const rm_pairs *p, char *out, size_t cap);
void cli_file_identity(const char *path, const rm_file *f, char *out, size_t cap);
/* The items of a training run's configuration that every rank must share
 * (everything but --threads, --quiet and --print-plan; paths by their
 * canonical names), with what its files hold (id); returns their count
 * (at most cap). */
int cli_config_items(const cli_args *a, const cli_run_identity *id, cli_config_item *items, int cap);

/* The run the flags describe, standing at `step` with `batch` the next
 * training batch's index, on data_tokens tokens of data_name. */
void cli_run_info(const cli_args *a, const char *data_name, size_t data_tokens, uint64_t step,
                  uint64_t batch, rm_run_info *r);
/* The session options the flags give, with `budget` as the memory budget
 * (NULL: none). Prints a usage error and returns 2 for a bad strategy or
 * size, else 0. */
/* --precision bf16 on a processor without AVX512-BF16: the one-line note
 * (on stderr) that products run on the portable kernel. */
void cli_precision_note(const cli_args *a);
int cli_options(const cli_args *a, const char *budget, rm_options *o);
/* --scratch, --scratch-bandwidth, --page into o (cli_options calls it); 2 after a usage error, else 0. */
int cli_paging_options(const cli_args *a, rm_options *o);
/* --scratch DIR's name: not empty, not longer than the library takes
 * (exit 2 naming the flag); the folder itself is the library's to check. */
int cli_check_scratch(const char *dir);
/* --scratch-bandwidth's value: bytes per second (2GB/s, 500MB) into *bps, or
 * "measure" (0: the probe); 2 after a usage error naming the flag, else 0. */
int cli_parse_bandwidth(const char *s, double *bps);
/* paging.c: what the steps of a run paged (--scratch), summed over the
 * steps after the first (its I/O also warms up), for the report
 * ("paged_out_bytes", "io_ms", "io_overlap", ...) and the summary line;
 * `outside`: a step's time outside rm_step (the data, an unfused update). */
typedef struct cli_paging { double io_ms, wait_ms; double out, in; int steps; double outside; } cli_paging;
void cli_paging_step(cli_paging *acc, const rm_session *s, int i, double outside_ms);
void cli_paging_report(const rm_session *s, const cli_paging *acc, double step_ms, int micro_batches, int resumed,
                       FILE *f);
/* The scratch bandwidth of the checkpoint file (docs/RECOMPUTE.md): save
 * writes what every rank's plan assumed (metadata scratch_write_bps and
 * scratch_read_bps, one figure per rank; a collective under mpirun), and
 * --resume with --scratch plans with the figures of its rank again, unless
 * --scratch-bandwidth is given (a figure, or `measure`) or the rank count
 * differs. cli_paging_resumed returns 1 when it set o's bandwidth (and says
 * so unless quiet). */
enum { CLI_BPS_RANKS = 64, CLI_BPS_META = 24 * CLI_BPS_RANKS }; /* more ranks: measured on resume */
void cli_paging_meta(const rm_session *s, char write[CLI_BPS_META], char read[CLI_BPS_META]);
int cli_paging_resumed(const cli_args *a, const rm_file *f, rm_options *o);
void cli_paging_summary(const rm_session *s, const cli_paging *acc, FILE *f);
/* The graph of the model the flags describe. */
rm_status cli_build_model(const cli_args *a, rm_graph *g, rm_model_io *io, int keep_logits);
#endif
