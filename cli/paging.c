/* paging.c: what remat train reports of the scratch tier (--scratch DIR,
 * issue 20): the bytes a step pages out and in, the I/O thread's time, how
 * long the steps waited for it and so how much of it overlapped compute. */
#include "args.h"
#include <stdio.h>

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

void cli_paging_report(const rm_session *s, const cli_paging *acc, double step_ms, int micro_batches, FILE *f) {
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
