/* paging.c: what remat train reports of the scratch tier (--scratch DIR,
 * issue 20): the bytes a step pages out and in, the I/O thread's time, how
 * long the steps waited for it and so how much of it overlapped compute. */
#include "args.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_paging_step(cli_paging *acc, const rm_session *s, int i, double outside_ms) {
    rm_paging_info p;
    rm_paging(s, &p);
    if (!p.enabled) return;
    if (i == 0 && acc->steps == 0) { /* the first step warms up; counted only if it is the only one */
        *acc = (cli_paging){p.io_ms, p.wait_ms, (double)p.out_bytes_measured, (double)p.in_bytes_measured, -1,
                            outside_ms};
        return;
    }
    if (acc->steps < 0) *acc = (cli_paging){0, 0, 0, 0, 0, 0};
    acc->io_ms += p.io_ms, acc->wait_ms += p.wait_ms;
    acc->out += (double)p.out_bytes_measured, acc->in += (double)p.in_bytes_measured;
    acc->outside += outside_ms;
    acc->steps++;
}

/* Per-step means of the steps counted. */
static void means(const cli_paging *acc, double *io, double *wait, double *out, double *in, double *outside) {
    double n = acc->steps < 0 ? 1 : acc->steps > 0 ? acc->steps : 1;
    *io = acc->io_ms / n, *wait = acc->wait_ms / n, *out = acc->out / n, *in = acc->in / n;
    *outside = acc->outside / n;
}

void cli_paging_report(const rm_session *s, const cli_paging *acc, double step_ms, int micro_batches, int resumed,
                       FILE *f) {
    rm_paging_info p;
    rm_paging(s, &p);
    rm_plan_info pl;
    rm_plan(s, &pl);
    double io, wait, out, in, outside;
    means(acc, &io, &wait, &out, &in, &outside);
    /* the plan's step: rm_step as the paging timeline predicts it (every
     * instruction at its profiled time, the waits), plus what the plan does
     * not model (the data, an unfused optimizer's update) as measured; and
     * the step as measured with only the recomputation and the waits
     * replaced by their predictions */
    fprintf(f, ",\n  \"ms_optimizer\": %.3f,\n  \"recompute_ms_predicted\": %.3f", pl.ms_optimizer,
            p.predicted_recompute_ms);
    if (p.predicted_step_ms > 0)
        fprintf(f, ",\n  \"rm_step_ms_predicted\": %.3f,\n  \"step_ms_outside_rm_step\": %.3f,\n"
                "  \"step_ms_predicted\": %.3f", p.predicted_step_ms, outside,
                p.predicted_step_ms * micro_batches + outside);
    else
        fprintf(f, ",\n  \"rm_step_ms_predicted\": null,\n  \"step_ms_predicted\": null");
    /* where the plan's bandwidth came from, and the probe's rounds (docs/RECOMPUTE.md) */
    fprintf(f, ",\n  \"scratch_bandwidth_source\": \"%s\",\n  \"scratch_probe_rounds\": %d,\n"
            "  \"scratch_write_bps_min\": %.0f,\n  \"scratch_write_bps_max\": %.0f,\n"
            "  \"scratch_read_bps_min\": %.0f,\n  \"scratch_read_bps_max\": %.0f",
            !p.enabled ? "none" : resumed ? "resumed" : p.probe_rounds ? "measured" : "given", p.probe_rounds,
            p.write_bps_min, p.write_bps_max, p.read_bps_min, p.read_bps_max);
    fprintf(f, ",\n  \"step_ms_predicted_waits\": %.3f",
            step_ms - pl.ms_recompute - wait + p.predicted_recompute_ms + p.predicted_wait_ms);
    fprintf(f, ",\n  \"scratch\": %s,\n  \"scratch_direct\": %s,\n  \"scratch_bytes\": %llu,\n"
            "  \"scratch_state_bytes\": %llu,\n  \"scratch_write_bps\": %.0f,\n  \"scratch_read_bps\": %.0f,\n"
            "  \"paged_values\": %d,\n  \"paged_moments\": %d,\n  \"paged_params\": %d,\n"
            "  \"paged_out_bytes\": %llu,\n  \"paged_in_bytes\": %llu,\n"
            "  \"paged_out_bytes_measured\": %.0f,\n  \"paged_in_bytes_measured\": %.0f,\n"
            "  \"io_ms\": %.3f,\n  \"io_wait_ms\": %.3f,\n  \"io_overlap\": %.4f,\n  \"io_wait_ms_predicted\": %.3f",
            p.enabled ? "true" : "false", p.direct ? "true" : "false", (unsigned long long)p.scratch_bytes,
            (unsigned long long)p.state_bytes, p.write_bps, p.read_bps, p.values_paged, p.moments_paged,
            p.params_paged, (unsigned long long)p.out_bytes, (unsigned long long)p.in_bytes, out, in, io, wait,
            io > 0 ? (wait < io ? 1.0 - wait / io : 0.0) : 0.0, p.predicted_wait_ms);
}

void cli_paging_summary(const rm_session *s, const cli_paging *acc, FILE *f) {
    rm_paging_info p;
    rm_paging(s, &p);
    if (!p.enabled) return;
    double io, wait, out, in, outside;
    means(acc, &io, &wait, &out, &in, &outside);
    fprintf(f, "paging: %d activations, moments of %d and %d parameters in the scratch file (%.1f MiB, %s); "
            "%.1f MiB out and %.1f MiB in a step, I/O %.1f ms a step, waited %.1f ms (%.0f%% overlapped compute)\n",
            p.values_paged, p.moments_paged, p.params_paged, p.scratch_bytes / 1048576.0,
            p.direct ? "O_DIRECT" : "page cache", out / 1048576.0, in / 1048576.0, io, wait,
            io > 0 ? 100.0 * (wait < io ? 1.0 - wait / io : 0.0) : 0.0);
}

/* Figures "a,b,c" (one per rank) into text. */
static void join_figures(const double *x, int n, int stride, char *out, size_t cap) {
    size_t k = 0;
    out[0] = 0;
    for (int r = 0; r < n && k < cap; r++) k += (size_t)snprintf(out + k, cap - k, "%s%.0f", r ? "," : "", x[r * stride]);
}

void cli_paging_meta(const rm_session *s, char write[CLI_BPS_META], char read[CLI_BPS_META]) {
    rm_paging_info p;
    rm_paging(s, &p);
    const double mine[2] = {p.write_bps, p.read_bps};
    const int n = cli_dist_size();
    double all[2 * CLI_BPS_RANKS];
    write[0] = read[0] = 0;
    if (n > CLI_BPS_RANKS) return; /* the same on every rank: none gathers */
    cli_dist_allgather(mine, 2, all);
    int every = 1;
    for (int r = 0; r < n; r++) every &= all[2 * r] > 0 && all[2 * r + 1] > 0;
    if (every) join_figures(all, n, 2, write, CLI_BPS_META), join_figures(all + 1, n, 2, read, CLI_BPS_META);
}

/* This rank's figure of the list `text` of `ranks` figures; 0 if malformed. */
static double rank_figure(const char *text, int rank, int ranks) {
    double x = 0;
    int n = 0;
    for (const char *p = text; p && *p; n++) {
        char *end = NULL;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !(v > 0 && v < 1e15)) return 0;
        if (n == rank) x = v;
        p = *end ? end + 1 : end;
    }
    return n == ranks ? x : 0;
}

int cli_paging_resumed(const cli_args *a, const rm_file *f, rm_options *o) {
    if (!f || !a->scratch || cli_given(a, "--scratch-bandwidth")) return 0;
    const char *w = rm_file_meta(f, "scratch_write_bps"), *r = rm_file_meta(f, "scratch_read_bps");
    const double wb = rank_figure(w, cli_dist_rank(), cli_dist_size()), rb = rank_figure(r, cli_dist_rank(), cli_dist_size());
    if (!(wb > 0 && rb > 0)) return 0; /* none recorded (no --scratch then), another rank count: measured */
    o->scratch_bandwidth = wb, o->scratch_read_bandwidth = rb;
    if (!a->quiet && cli_dist_rank() == 0)
        cli_notice("note", "--resume plans the paging with the scratch bandwidth the run planned with before "
                   "(write %.2f, read %.2f GB/s); --scratch-bandwidth measure measures it again", wb / 1e9, rb / 1e9);
    return 1;
}
