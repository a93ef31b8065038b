/* test_planner.c: the Rotor dynamic program against the published example
 * and against an exhaustive search over all operation sequences. */
#include "check.h"
#include "exec/exec.h"
#include "plan/rotor/rotor.h"
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static void homogeneous(rm_chain_model *c) {
    /* 6 stages uf=1 ub=2 a=1 ab=2, then a free loss stage with input size 1 */
    rm_chain_model_alloc(c, 7);
    for (int i = 0; i < 6; i++) c->uf[i] = 1, c->ub[i] = 2, c->a[i] = 1, c->ab[i] = 2;
    c->a[6] = 1, c->a[7] = 0;
}

static void test_published(void) {
    rm_chain_model c;
    homogeneous(&c);
    int64_t budgets[] = {5, 6, 7, 9, 14};
    double times[] = {33, 26, 23, 21, 18};
    for (int i = 0; i < 5; i++) {
        rm_rotor_plan p;
        rm_rotor_solve(&c, budgets[i], 500, &p);
        CHECK(p.feasible && p.time == times[i], "budget %lld: time %g, published %g", (long long)budgets[i], p.time,
              times[i]);
        CHECK(p.peak_bytes <= budgets[i], "budget %lld: simulated peak %lld", (long long)budgets[i],
              (long long)p.peak_bytes);
        rm_rotor_plan_free(&p);
    }
    rm_rotor_plan p;
    rm_rotor_solve(&c, 3, 500, &p);
    CHECK(!p.feasible, "budget 3 is infeasible");
    rm_rotor_plan_free(&p);
    rm_chain_model_free(&c);
}

/* Exhaustive search as a shortest path: a state is which x_i (0, 1 or 2),
 * x̄_i (0, full or selective) and d_i are held; an edge is any operation the
 * simulator accepts whose peak stays in the budget, weighted by its time.
 * Memory is a function of the state, so Dijkstra over states gives the least
 * time over all operation sequences. */
typedef struct sp_entry {
    uint64_t key;
    double time;
} sp_entry;

typedef struct sp_map { /* open addressing; key 0 is no state (x_0 or d_0 is always held) */
    sp_entry *e;
    size_t cap, n;
} sp_map;

static sp_entry *sp_slot(sp_map *m, uint64_t key) {
    size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull >> 20) & (m->cap - 1);
    while (m->e[i].key && m->e[i].key != key) i = (i + 1) & (m->cap - 1);
    return &m->e[i];
}

static int sp_grow(sp_map *m) {
    sp_map big = {calloc(m->cap * 2, sizeof(sp_entry)), m->cap * 2, m->n};
    if (!big.e) return 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->e[i].key) *sp_slot(&big, m->e[i].key) = m->e[i];
    free(m->e);
    *m = big;
    return 1;
}

typedef struct sp_heap {
    sp_entry *e;
    size_t n, cap;
} sp_heap;

static int sp_push(sp_heap *h, uint64_t key, double time) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 1024;
        void *p = realloc(h->e, nc * sizeof *h->e);
        if (!p) return 0;
        h->e = p, h->cap = nc;
    }
    size_t i = h->n++;
    while (i && h->e[(i - 1) / 2].time > time) h->e[i] = h->e[(i - 1) / 2], i = (i - 1) / 2;
    h->e[i].key = key, h->e[i].time = time;
    return 1;
}

static sp_entry sp_pop(sp_heap *h) {
    sp_entry top = h->e[0], last = h->e[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->e[c + 1].time < h->e[c].time) c++;
        if (h->e[c].time >= last.time) break;
        h->e[i] = h->e[c], i = c;
    }
    if (h->n) h->e[i] = last;
    return top;
}

static void copy_state(const rm_chain_model *c, rm_rotor_sim *dst, const rm_rotor_sim *src) {
    memcpy(dst->x, src->x, (size_t)c->n + 2);
    memcpy(dst->xbar, src->xbar, (size_t)c->n + 1);
    memcpy(dst->dgrad, src->dgrad, (size_t)c->n + 2);
    dst->mem = src->mem, dst->peak = src->peak, dst->time = src->time;
}

/* 2 bits per x_i (i <= n) and x̄_i, 1 bit per d_i (i <= n): n <= 12 fits */
static uint64_t sp_pack(const rm_chain_model *c, const rm_rotor_sim *st) {
    uint64_t k = 0;
    for (int i = 0; i <= c->n; i++) k = k << 2 | (uint64_t)st->x[i];
    for (int i = 0; i < c->n; i++) k = k << 2 | (uint64_t)st->xbar[i];
    for (int i = 0; i <= c->n; i++) k = k << 1 | (uint64_t)st->dgrad[i];
    return k;
}

static void sp_unpack(const rm_chain_model *c, uint64_t k, rm_rotor_sim *st) {
    int64_t mem = 0;
    for (int i = c->n; i >= 0; i--) st->dgrad[i] = (char)(k & 1), k >>= 1, mem += st->dgrad[i] ? c->a[i] : 0;
    for (int i = c->n - 1; i >= 0; i--) {
        st->xbar[i] = (char)(k & 3), k >>= 2;
        mem += st->xbar[i] == 1 ? c->ab[i] : st->xbar[i] == 2 ? c->ab2[i] : 0;
    }
    for (int i = c->n; i >= 0; i--) st->x[i] = (char)(k & 3), k >>= 2, mem += st->x[i] ? c->a[i] : 0;
    st->mem = st->peak = mem;
}

/* The least time within `budget`, INFINITY when nothing fits; -1 when out of memory. */
static double shortest_schedule(const rm_chain_model *c, int64_t budget) {
    rm_rotor_sim st, base;
    if (!rm_rotor_sim_init(c, &st)) return -1;
    if (!rm_rotor_sim_init(c, &base)) {
        rm_rotor_sim_free(&st);
        return -1;
    }
    double best = INFINITY;
    sp_map seen = {calloc(1 << 16, sizeof(sp_entry)), 1 << 16, 0};
    sp_heap heap = {0};
    if (!seen.e) goto out;
    if (st.peak <= budget) {
        uint64_t k0 = sp_pack(c, &st);
        sp_entry *e = sp_slot(&seen, k0);
        e->key = k0, e->time = 0, seen.n++;
        if (!sp_push(&heap, k0, 0)) goto oom;
    }
    int kinds = c->ab2 ? 6 : 5;
    while (heap.n) {
        sp_entry top = sp_pop(&heap);
        if (sp_slot(&seen, top.key)->time < top.time) continue; /* a stale entry */
        sp_unpack(c, top.key, &base);
        base.time = top.time;
        if (base.dgrad[0]) {
            best = top.time;
            break;
        }
        for (int s = 0; s < c->n; s++)
            for (int k = 0; k < kinds; k++) {
                copy_state(c, &st, &base);
                rm_rotor_op op = {(rm_rotor_op_kind)k, s};
                if (!rm_rotor_apply(c, &st, op) || st.peak > budget) continue;
                uint64_t key = sp_pack(c, &st);
                sp_entry *e = sp_slot(&seen, key);
                if (e->key && e->time <= st.time) continue;
                if (!e->key) {
                    e->key = key, seen.n++;
                }
                e->time = st.time;
                if (!sp_push(&heap, key, st.time)) goto oom;
                if (seen.n * 2 > seen.cap && !sp_grow(&seen)) goto oom;
            }
    }
out:
    free(seen.e), free(heap.e);
    rm_rotor_sim_free(&st), rm_rotor_sim_free(&base);
    return best;
oom:
    best = -1;
    goto out;
}

/* The search itself, independently of the DP, finds the published times. */
static void test_published_exhaustive(void) {
    rm_chain_model c;
    homogeneous(&c);
    int64_t budgets[] = {3, 5, 6, 7, 9, 14};
    double times[] = {INFINITY, 33, 26, 23, 21, 18};
    for (int i = 0; i < 6; i++) {
        double t = shortest_schedule(&c, budgets[i]);
        CHECK(t == times[i], "exhaustive search, budget %lld: %g, published %g", (long long)budgets[i], t, times[i]);
    }
    rm_chain_model_free(&c);
}

/* A random chain of `stages` stages and the loss, sizes and times small
 * integers; with `selective`, every stage also gets a cheaper-to-keep option
 * whose backward is slower (ab2 <= ab, ub2 >= ub). */
static void random_chain(rm_chain_model *c, int stages, int selective) {
    rm_chain_model_alloc(c, stages + 1);
    if (selective) rm_chain_model_alloc_selective(c);
    for (int i = 0; i < stages; i++) c->a[i] = 1 + rand() % 3;
    c->a[stages] = 1 + rand() % 2, c->a[stages + 1] = 0;
    for (int i = 0; i < stages; i++) {
        /* x̄_i holds the output x_{i+1} (see rotor.h) */
        c->uf[i] = 1 + rand() % 3, c->ub[i] = 1 + rand() % 4;
        c->ab[i] = c->a[i + 1] + rand() % 4;
        c->ft[i] = rand() % 2, c->bt[i] = rand() % 3;
        if (selective) {
            c->ab2[i] = c->ab[i] - rand() % (c->ab[i] - c->a[i + 1] + 1);
            c->ub2[i] = c->ub[i] + rand() % 3, c->bt2[i] = c->bt[i] + rand() % 2;
        }
    }
}

static void test_brute_force(void) {
    srand(12345);
    int bad = 0, cases = 0, feasible = 0, selective_used = 0;
    int grouped_bad = 0, grouped_cases = 0, grouped_optimal = 0, grouped_feasible = 0;
    for (int trial = 0; trial < 50; trial++) {
        /* 2..6 stages, then the loss: chains of up to 7 */
        int stages = 2 + trial % 5, sel = trial % 2;
        rm_chain_model c;
        random_chain(&c, stages, sel);
        int64_t total = c.a[0] + c.a[stages];
        for (int i = 0; i < stages; i++) total += c.ab[i] + c.ft[i] + c.bt[i];
        for (int64_t budget = 2; budget <= total; budget += 1 + total / 8) {
            rm_rotor_plan p;
            rm_rotor_solve(&c, budget, 500, &p);
            double dp_time = p.feasible ? p.time : INFINITY;
            double brute = shortest_schedule(&c, budget);
            cases++;
            if (brute != dp_time && bad++ < 5)
                fprintf(stderr, "  trial %d (%d stages) budget %lld: dp %g, exhaustive %g\n", trial, stages,
                        (long long)budget, dp_time, brute);
            if (p.feasible) {
                double t;
                int64_t peak;
                int valid = rm_rotor_simulate(&c, p.ops, p.n_ops, &t, &peak);
                if (!valid || t != p.time || peak > budget) bad++;
                feasible++;
                for (int k = 0; k < p.n_ops; k++) selective_used += p.ops[k].kind == RM_ROTOR_FSEL;
            }
            rm_rotor_plan_free(&p);
            /* grouped (as long chains are planned): a valid sequence in the
             * budget, never faster than the optimum */
            for (int groups = 2; groups < c.n; groups++) {
                rm_rotor_solve_groups(&c, budget, 500, groups, &p);
                double t;
                int64_t peak;
                if (p.feasible && (!rm_rotor_simulate(&c, p.ops, p.n_ops, &t, &peak) || t != p.time ||
                                   peak > budget || t < brute))
                    grouped_bad++;
                grouped_cases++, grouped_optimal += p.feasible && p.time == brute;
                grouped_feasible += p.feasible;
                rm_rotor_plan_free(&p);
            }
        }
        rm_chain_model_free(&c);
    }
    CHECK(bad == 0, "%d of %d random chains: the DP is not optimal, or its plan does not replay", bad, cases);
    /* the sweep must exercise both sides, and the selective option */
    CHECK(feasible > 0 && feasible < cases, "%d of %d budgets feasible", feasible, cases);
    CHECK(selective_used > 0, "no plan used the selective option");
    CHECK(grouped_bad == 0, "%d of %d grouped plans do not replay, exceed the budget or beat the optimum",
          grouped_bad, grouped_cases);
    printf("grouped plans on chains of 3 to 7: %d of %d budgets feasible, %d optimal\n", grouped_feasible,
           grouped_cases, grouped_optimal);
    CHECK(grouped_feasible > grouped_cases / 2, "grouped plans found for only %d of %d budgets", grouped_feasible,
          grouped_cases);
}

static void test_monotone(void) {
    /* 100 stages, 500 slots; larger budgets never give slower plans */
    rm_chain_model c;
    rm_chain_model_alloc(&c, 100);
    srand(7);
    int64_t total = 0;
    for (int i = 0; i < 99; i++) {
        c.uf[i] = 1 + rand() % 10, c.ub[i] = 2 + rand() % 20;
        c.a[i] = 1000 + rand() % 5000, c.ab[i] = 3000 + rand() % 20000;
        total += c.ab[i];
    }
    c.a[99] = 1000, c.a[100] = 0;
    /* how fast (the target: under a second) is measured in bench/plan_speed.sh,
     * not here: timing has no place in a pass/fail test */
    rm_rotor_plan p;
    rm_rotor_solve(&c, total / 3, 500, &p);
    CHECK(p.feasible, "100 stages at a third of store-all is feasible");
    rm_rotor_plan_free(&p);
    double prev = INFINITY;
    int mono = 1;
    for (int k = 1; k <= 12; k++) {
        rm_rotor_solve(&c, total * k / 10, 500, &p);
        double t = p.feasible ? p.time : INFINITY;
        if (t > prev) mono = 0;
        prev = t;
        rm_rotor_plan_free(&p);
    }
    CHECK(mono, "a larger budget gave a slower plan");
    rm_chain_model_free(&c);
}

/* A long chain's plan over groups against the exact program on the same
 * chain (90 stages: the exact table is cheap): valid, in the budget, and
 * its time within 10% of the exact plan's from twice the least budget up
 * (nearer the least, checkpoints on group boundaries only cost more). */
static void test_grouped_quality(void) {
    rm_chain_model c;
    rm_chain_model_alloc(&c, 90);
    srand(11);
    int64_t total = 0;
    for (int i = 0; i < 89; i++) {
        c.uf[i] = 1 + rand() % 10, c.ub[i] = 2 + rand() % 20;
        c.a[i] = 1000 + rand() % 5000, c.ab[i] = 3000 + rand() % 20000;
        c.ft[i] = rand() % 2000, c.bt[i] = c.a[i] + rand() % 2000;
        total += c.ab[i] + c.ft[i];
    }
    c.a[89] = 1000, c.a[90] = 0;
    for (int i = 0; i + 1 < 90; i++)
        if (c.ab[i] < c.a[i + 1]) c.ab[i] = c.a[i + 1];
    int64_t least = rm_rotor_min_budget(&c, 500);
    int bad = 0, compared = 0;
    double worst = 0;
    for (int gi = 0; gi < 3; gi++) {
        int groups = (int[]){10, 20, 45}[gi];
        for (int k = 0; k < 7; k++) {
            int64_t budget = (int64_t)(least * (double[]){1.0, 1.25, 1.5, 2, 4, 10, 25}[k]);
            rm_rotor_plan e, p;
            rm_rotor_solve_groups(&c, budget, 500, 90, &e);
            rm_rotor_solve_groups(&c, budget, 500, groups, &p);
            double t;
            int64_t peak;
            if (p.feasible && (!rm_rotor_simulate(&c, p.ops, p.n_ops, &t, &peak) || peak > budget)) bad++;
            if (e.feasible && p.feasible) {
                double ratio = p.time / e.time;
                printf("  90 stages, %2d groups, budget %.2fx least: time %.0f, exact %.0f (%.3fx)\n", groups,
                       (double)budget / least, p.time, e.time, ratio);
                if (budget >= 2 * least) {
                    compared++;
                    if (ratio > worst) worst = ratio;
                }
            }
            rm_rotor_plan_free(&e), rm_rotor_plan_free(&p);
        }
    }
    CHECK(bad == 0, "%d grouped plans do not replay or exceed their budget", bad);
    CHECK(compared >= 12 && worst <= 1.10, "grouped plans from twice the least budget: worst %.3fx the exact "
          "time over %d budgets", worst, compared);
    rm_chain_model_free(&c);
}

/* The chain planner as it was before long chains were grouped (the exact
 * program at 500 slots; its plan lowered reading the copies made before;
 * while the arena exceeds the budget, the budget given to the program
 * lowered by the excess; the uniform schedules priced alongside): the
 * recomputation it costs at `budget`, INFINITY when it finds no plan. */
static double old_planner_cost(const rm_graph *g, const rm_program *none, int64_t budget) {
    char err[256];
    rm_chain c;
    rm_chain_model m;
    if (rm_chain_build(g, &c, err, sizeof err) != RM_OK) return NAN;
    if (rm_chain_model_build(g, &c, NULL, 1, none, &m) != RM_OK) return rm_chain_free(&c), NAN;
    double best = INFINITY;
    int64_t target = budget;
    for (int attempt = 0; attempt < 16 && target > 0 && best == INFINITY; attempt++) {
        rm_rotor_plan p;
        if (rm_rotor_solve_groups(&m, target, 500, m.n, &p) != RM_OK || !p.feasible) {
            rm_rotor_plan_free(&p);
            break;
        }
        rm_schedule s = {0};
        rm_program prog;
        int ok = rm_schedule_lower(g, &c, p.ops, p.n_ops, 0, &s, err, sizeof err) == RM_OK &&
                 rm_program_build(g, &s, 1, &prog, err, sizeof err) == RM_OK;
        rm_rotor_plan_free(&p);
        rm_schedule_free(&s);
        if (!ok) break;
        rm_memplan(&prog);
        int64_t arena = (int64_t)prog.arena_bytes;
        if (arena <= budget) best = rm_recompute_cost(g, &prog, NULL);
        rm_program_free(&prog);
        target -= arena - budget > target / 100 ? arena - budget : target / 100 + 1;
    }
    for (int k = 2; k <= c.n + 1; k++) {
        char name[32];
        snprintf(name, sizeof name, k <= c.n ? "segments:%d" : "blocks", k);
        rm_schedule s;
        rm_program prog;
        if (rm_schedule_build(g, name, 1, NULL, &s, err, sizeof err) != RM_OK) continue;
        if (rm_program_build(g, &s, 1, &prog, err, sizeof err) == RM_OK) {
            rm_memplan(&prog);
            double cost = rm_recompute_cost(g, &prog, NULL);
            if ((int64_t)prog.arena_bytes <= budget && cost < best) best = cost;
            rm_program_free(&prog);
        }
        rm_schedule_free(&s);
    }
    rm_chain_model_free(&m);
    rm_chain_free(&c);
    return best;
}

/* GPT and MLP plans are no worse than that planner's at the same budgets
 * (chains it plans in seconds), and fit their budgets on the real arena. */
static void test_no_worse_than_before(void) {
    int worse = 0, lost = 0, better = 0, cases = 0;
    for (int model = 0; model < 5; model++) {
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        int layers = (int[]){4, 16, 40, 12, 40}[model];
        if (model < 3) {
            rm_gpt_config gc = {.layers = layers, .dim = 8, .heads = 1, .context = 8, .vocab = 256, .batch = 1};
            rm_gpt_build(g, &gc, &io);
        } else {
            rm_mlp_config mc = {.context = 4, .vocab = 32, .batch = 4, .n_widths = layers};
            for (int i = 0; i < layers; i++) mc.widths[i] = 16 + 8 * (i % 3);
            rm_mlp_build(g, &mc, &io);
        }
        rm_autodiff(g);
        char err[256];
        rm_schedule s;
        rm_program none;
        rm_schedule_build(g, "none", 1, NULL, &s, err, sizeof err);
        rm_program_build(g, &s, 1, &none, err, sizeof err);
        rm_schedule_free(&s);
        rm_memplan(&none);
        for (int b = 0; b < 4; b++) {
            int64_t budget = (int64_t)((double)none.arena_bytes * (double[]){0.12, 0.3, 0.5, 0.7}[b]);
            double before = old_planner_cost(g, &none, budget), now = INFINITY;
            rm_auto_info info = {0};
            info.store_all = (int64_t)none.arena_bytes;
            if (rm_schedule_auto(g, budget, 500, 0, 1, NULL, &none, &s, &info, err, sizeof err) == RM_OK) {
                rm_program p;
                if (rm_program_build(g, &s, 1, &p, err, sizeof err) == RM_OK) {
                    rm_memplan(&p);
                    CHECK((int64_t)p.arena_bytes <= budget, "%s %d: arena %zu over the budget %lld",
                          model < 3 ? "gpt" : "mlp", layers, p.arena_bytes, (long long)budget);
                    now = rm_recompute_cost(g, &p, NULL);
                    rm_program_free(&p);
                }
                rm_schedule_free(&s);
            }
            cases++;
            worse += now > before * (1 + 1e-9);
            lost += now == INFINITY && before < INFINITY;
            better += now < before * (1 - 1e-9);
            printf("  %s %2d layers, budget %4.0f%%: recompute %.6g, before %.6g\n", model < 3 ? "gpt" : "mlp", layers,
                   100.0 * budget / none.arena_bytes, now, before);
        }
        rm_program_free(&none);
        rm_graph_free(g);
    }
    CHECK(worse == 0 && lost == 0, "%d of %d budgets cost more than before (%d with no plan)", worse, cases, lost);
    printf("GPT and MLP chains: %d of %d budgets cheaper than before, none dearer\n", better, cases);
}

int main(void) {
    test_published();
    test_published_exhaustive();
    test_brute_force();
    test_monotone();
    test_grouped_quality();
    test_no_worse_than_before();
    return check_done("test_planner");
}
