/* chainfile.c: the planner for chains described by someone else, e.g. a
 * PyTorch model they profiled: {"stages": [{"uf":..,"ub":..,"a":..,"ab":..,
 * "ft":..,"bt":..}, ...]}, the last stage being the loss, `a` a stage's input
 * bytes; ft and bt may be omitted. The answer is JSON too. */
#include "plan/plan.h"
#include "plan/rotor/rotor.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int get_num(const cJSON *o, const char *key, int required, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        *out = 0;
        return !required;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble)) return 0;
    *out = v->valuedouble;
    return 1;
}

/* The optional second way to keep stage i ("ab_sel", "ub_sel", "bt_sel",
 * all three or none): what it holds, its backward's time and workspace when
 * its cheap values are rebuilt inside its backward (remat's Fsel). The first
 * stage that has them allocates the arrays; the others are marked -1. */
static rm_status parse_selective(const cJSON *st, int i, rm_chain_model *m, char *err, size_t errlen) {
    int has = cJSON_GetObjectItemCaseSensitive(st, "ab_sel") || cJSON_GetObjectItemCaseSensitive(st, "ub_sel") ||
              cJSON_GetObjectItemCaseSensitive(st, "bt_sel");
    double ab2, ub2, bt2;
    if (!has) {
        if (m->ab2) m->ab2[i] = -1;
        return RM_OK;
    }
    if (!get_num(st, "ab_sel", 1, &ab2) || !get_num(st, "ub_sel", 1, &ub2) || !get_num(st, "bt_sel", 1, &bt2) ||
        ab2 > 9e18 || bt2 > 9e18) {
        snprintf(err, errlen, "stage %d: ab_sel, ub_sel and bt_sel go together, non-negative numbers", i);
        return RM_ERR_FORMAT;
    }
    if (!m->ab2) {
        if (rm_chain_model_alloc_selective(m) != RM_OK) return snprintf(err, errlen, "out of memory"), RM_ERR_NOMEM;
        for (int k = 0; k < i; k++) m->ab2[k] = -1;
    }
    m->ab2[i] = (int64_t)ceil(ab2), m->ub2[i] = ub2, m->bt2[i] = (int64_t)ceil(bt2);
    return RM_OK;
}

/* The optional "ck_last" of stage i: the last stage a checkpointed range
 * starting at i may reach (an integer; below i: no range starts there). */
static rm_status parse_ck_last(const cJSON *st, int i, rm_chain_model *m, char *err, size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, "ck_last");
    if (!v) return RM_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !(v->valuedouble >= -1) ||
        !(v->valuedouble < m->n)) {
        snprintf(err, errlen, "stage %d: ck_last must be an integer from -1 to %d (the last stage a checkpointed "
                 "range starting here may reach)", i, m->n - 1);
        return RM_ERR_FORMAT;
    }
    if (!m->ck_last && rm_chain_model_alloc_ranges(m) != RM_OK)
        return snprintf(err, errlen, "out of memory"), RM_ERR_NOMEM;
    m->ck_last[i] = (int)v->valuedouble;
    return RM_OK;
}

static rm_status parse_chain(const char *text, rm_chain_model *m, char *err, size_t errlen) {
    cJSON *root = rm_json_parse(text, err, errlen); /* one object, no key twice */
    const cJSON *stages = root ? cJSON_GetObjectItemCaseSensitive(root, "stages") : NULL;
    int n = cJSON_IsArray(stages) ? cJSON_GetArraySize(stages) : 0;
    if (!root || n < 1 || n > 100000) {
        if (root && n > 100000) snprintf(err, errlen, "the chain has %d stages; a chain file holds at most 100000", n);
        else if (root) snprintf(err, errlen, "expected {\"stages\": [ {...}, ... ]} with 1 to 100000 stages");
        cJSON_Delete(root);
        return RM_ERR_FORMAT;
    }
    if (rm_chain_model_alloc(m, n) != RM_OK) {
        cJSON_Delete(root);
        snprintf(err, errlen, "out of memory");
        return RM_ERR_NOMEM;
    }
    const cJSON *st = stages->child; /* walked, not indexed: cJSON_GetArrayItem(i) walks from the start (100000 stages took 12 s) */
    for (int i = 0; i < n; i++, st = st->next) {
        double a, ab, ft, bt;
        if (!cJSON_IsObject(st) || !get_num(st, "uf", 1, &m->uf[i]) || !get_num(st, "ub", 1, &m->ub[i]) ||
            !get_num(st, "a", 1, &a) || !get_num(st, "ab", 1, &ab) || !get_num(st, "ft", 0, &ft) ||
            !get_num(st, "bt", 0, &bt) || a > 9e18 || ab > 9e18 || ft > 9e18 || bt > 9e18) {
            snprintf(err, errlen, "stage %d: needs non-negative numbers uf, ub, a, ab (ft, bt optional)", i);
            rm_chain_model_free(m);
            cJSON_Delete(root);
            return RM_ERR_FORMAT;
        }
        m->a[i] = (int64_t)ceil(a), m->ab[i] = (int64_t)ceil(ab), m->ft[i] = (int64_t)ceil(ft);
        m->bt[i] = (int64_t)ceil(bt);
        if (parse_selective(st, i, m, err, errlen) != RM_OK || parse_ck_last(st, i, m, err, errlen) != RM_OK) {
            rm_chain_model_free(m);
            cJSON_Delete(root);
            return RM_ERR_FORMAT;
        }
    }
    for (int i = 0; m->ab2 && i < n; i++) /* stages without the option: keeping them selectively is Fall */
        if (m->ab2[i] < 0) m->ab2[i] = m->ab[i], m->ub2[i] = m->ub[i], m->bt2[i] = m->bt[i];
    m->a[n] = 0;
    double total = 0, time = 0; /* in double: no overflow however large the numbers */
    for (int i = 0; i < n; i++) {
        total += (double)m->a[i] + (double)m->ab[i] + (double)m->ft[i] + (double)m->bt[i];
        time += m->uf[i] + m->ub[i];
    }
    for (int i = 0; m->ab2 && i < n; i++) total += (double)m->ab2[i] + (double)m->bt2[i], time += m->ub2[i];
    if (total * 2 > (double)RM_ROTOR_MAX_BYTES || !(time <= RM_PLAN_MAX_TIME)) {
        if (!(time <= RM_PLAN_MAX_TIME))
            snprintf(err, errlen, "the stages' times (uf, ub, ub_sel) add up to %.3g; the planner takes at most %.3g "
                     "in all (use a coarser unit)", time, RM_PLAN_MAX_TIME);
        else
            snprintf(err, errlen, "the stages' bytes (a, ab, ft, bt, ab_sel, bt_sel) add up to %.3g; the planner "
                     "takes at most %.3g (2^59) in all", total, (double)RM_ROTOR_MAX_BYTES / 2);
        rm_chain_model_free(m);
        cJSON_Delete(root);
        return RM_ERR_FORMAT;
    }
    /* Fall keeps x̄_i, which holds the stage's output x_{i+1}: a smaller ab
     * (a profile that left the output out) is read as a[i+1] */
    for (int i = 0; i + 1 < n; i++) {
        if (m->ab[i] < m->a[i + 1]) m->ab[i] = m->a[i + 1];
        if (m->ab2 && m->ab2[i] < m->a[i + 1]) m->ab2[i] = m->a[i + 1];
    }
    cJSON_Delete(root);
    return RM_OK;
}

/* an upper bound on what storing everything needs */
static int64_t store_all(const rm_chain_model *m) {
    int64_t hi = m->a[0];
    for (int i = 0; i < m->n; i++) hi += m->ab[i] + m->a[i + 1] + m->ft[i] + m->bt[i];
    return hi;
}

rm_status rm_plan_chain(const char *chain_json, int64_t budget, char **result_json, char *err, size_t errlen) {
    if (!err || errlen == 0) return RM_ERR_ARG;
    if (!result_json) return snprintf(err, errlen, "rm_plan_chain: result_json is NULL"), RM_ERR_ARG;
    *result_json = NULL;
    if (!chain_json) return snprintf(err, errlen, "rm_plan_chain: chain_json is NULL"), RM_ERR_ARG;
    if (budget < 0)
        return snprintf(err, errlen, "budget %lld is negative: give the bytes the plan may use", (long long)budget),
               RM_ERR_ARG;
    rm_chain_model m;
    rm_status rc = parse_chain(chain_json, &m, err, errlen);
    if (rc != RM_OK) return rc;
    rm_rotor_plan p;
    /* storing everything fits in store_all(m) (at most 2^59 after parse_chain):
     * a budget above twice that plans as twice that, whose slots still fit it */
    int64_t cap = 2 * store_all(&m) + 1;
    rc = rm_rotor_solve(&m, budget < cap ? budget : cap, 500, &p);
    if (rc != RM_OK && !rm_rotor_slots(m.n, 500))
        snprintf(err, errlen, "%d stages are too many for the planner (%d at most)", m.n, RM_ROTOR_MAX_STAGES);
    else if (rc != RM_OK)
        snprintf(err, errlen, "out of memory planning the chain");
    /* the least budget, the same whatever was asked; at or above it a plan
     * exists, so where the slotted program found none the least's serves */
    rm_rotor_plan at;
    int64_t min = rc == RM_OK ? rm_rotor_least(&m, 500, &at) : -1;
    if (rc == RM_OK && !p.feasible && min >= 0 && budget >= min) {
        rm_rotor_plan_free(&p);
        p = at;
        memset(&at, 0, sizeof at);
    }
    if (rc == RM_OK) rm_rotor_plan_free(&at);
    cJSON *out = cJSON_CreateObject(), *seq = cJSON_CreateArray();
    if (rc == RM_OK && out && seq) {
        cJSON_AddBoolToObject(out, "feasible", p.feasible);
        cJSON_AddNumberToObject(out, "time", p.feasible ? p.time : -1);
        cJSON_AddNumberToObject(out, "peak_bytes", p.feasible ? (double)p.peak_bytes : -1);
        cJSON_AddNumberToObject(out, "min_budget_bytes", (double)min);
        cJSON_AddNumberToObject(out, "budget_bytes", (double)budget);
        for (int k = 0; k < p.n_ops; k++) {
            char op[32];
            snprintf(op, sizeof op, "%s %d", rm_rotor_op_name(p.ops[k].kind), p.ops[k].stage);
            cJSON_AddItemToArray(seq, cJSON_CreateString(op));
        }
        cJSON_AddItemToObject(out, "sequence", seq);
        seq = NULL;
        *result_json = cJSON_PrintUnformatted(out);
        if (!*result_json) rc = RM_ERR_NOMEM;
        else if (!p.feasible) {
            snprintf(err, errlen, "no schedule fits in %lld bytes; the minimum is %lld", (long long)budget,
                     (long long)min);
            rc = RM_ERR_BUDGET;
        }
    } else if (rc == RM_OK) {
        rc = RM_ERR_NOMEM;
    }
    cJSON_Delete(seq);
    cJSON_Delete(out);
    rm_rotor_plan_free(&p);
    rm_chain_model_free(&m);
    return rc;
}

rm_status rm_plan_chain_sweep(const char *chain_json, int points, FILE *csv, char *err, size_t errlen) {
    if (!err || errlen == 0) return RM_ERR_ARG;
    if (!chain_json || !csv) return snprintf(err, errlen, "rm_plan_chain_sweep: chain_json or csv is NULL"), RM_ERR_ARG;
    if (points > RM_SWEEP_MAX_POINTS)
        return snprintf(err, errlen, "rm_plan_chain_sweep: %d points asked; at most %d (each is a plan)", points,
                        RM_SWEEP_MAX_POINTS), RM_ERR_ARG;
    rm_chain_model m;
    rm_status rc = parse_chain(chain_json, &m, err, errlen);
    if (rc != RM_OK) return rc;
    if (!rm_rotor_slots(m.n, 500)) {
        snprintf(err, errlen, "%d stages are too many for the planner (%d at most)", m.n, RM_ROTOR_MAX_STAGES);
        rm_chain_model_free(&m);
        return RM_ERR_ARG;
    }
    rm_rotor_plan at;
    int64_t lo = rm_rotor_least(&m, 500, &at), hi = store_all(&m);
    if (hi < lo) hi = lo; /* the minimum is found in slots: it can round above the sum */
    double base = 0;
    for (int i = 0; i < m.n; i++) base += m.uf[i] + m.ub[i];
    fprintf(csv, "budget_bytes,time,overhead,peak_bytes\n");
    if (points < 2) points = 2;
    int written = 0;
    for (int k = 0; k < points && lo >= 0; k++) {
        int64_t b = lo + (int64_t)((double)(hi - lo) * k / (points - 1)); /* no 64-bit product */
        rm_rotor_plan p;
        rc = rm_rotor_solve(&m, b, 500, &p);
        const rm_rotor_plan *q = rc == RM_OK && p.feasible ? &p : at.feasible ? &at : NULL; /* b >= the least */
        if (q) {
            fprintf(csv, "%lld,%.6g,%.4f,%lld\n", (long long)b, q->time, base > 0 ? q->time / base - 1 : 0,
                    (long long)q->peak_bytes);
            written++;
        }
        rm_rotor_plan_free(&p);
    }
    rm_rotor_plan_free(&at);
    rm_chain_model_free(&m);
    if (!written) {
        snprintf(err, errlen, "no budget up to store-all (%lld bytes) has a feasible schedule", (long long)hi);
        return RM_ERR_BUDGET;
    }
    return RM_OK;
}
