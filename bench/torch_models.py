#!/usr/bin/python3
"""torch_models.py: rematplan against per-layer checkpointing on the models
of issue 34, on CPU (docs/BENCH_MODELS.md).

    PYTHONPATH=python REMAT_LIBRARY=$PWD/build/libremat.so \\
        /work/venv/torch2/bin/python bench/torch_models.py [--smoke] [--models a,b] [--out FILE]

Models (--models, default all; every one built from a config with random
weights and a fixed seed, dropout on where the model has it, train mode;
shapes in bench/torch_models_zoo.py): transformers' BERT (masked LM), T5,
ViT, Mistral, Qwen2, GPT-NeoX, Whisper, BART, CLIP (return_loss), Mistral
+ PEFT LoRA, GPT2 and Llama (6 x 128); torchvision's ConvNeXt and
MobileNetV3-Large; a nanoGPT-style GPT; the MLP (8 x Linear then F.gelu as
a function). Each forward returns the loss.

Configurations:
  none              store everything
  per-layer         what users have: transformers' gradient_checkpointing_enable
                    (non-reentrant); checkpoint(block, x, use_reentrant=False) per
                    block for torchvision, nanoGPT and the MLP (per Linear+gelu)
  remat@per-layer   rematplan.plan at per-layer's measured peak (bytes), applied
  remat@0.5         rematplan.plan at 0.5 of the measured store-all (a float)
  remat@least       the least budget rematplan names: from the refusal of one of
                    the above, else rematplan.plan at 0.01 (planned at that least
                    and measured, not timed)
A refused budget is planned again at the least the refusal names (the same
model object, so its profile is reused), and that plan is what is measured.
Each rematplan configuration plans a fresh copy of the model (the same
weights): every plan() time includes the capture a user's first call pays.

Measures, the same for every configuration: the step's peak above what was
allocated before it, by PyTorch's CPU allocator count
(rematplan._verify.measure_step, the forward's output held through the
backward); the step time (forward + backward, the output held, .grad set to
None before each step), --steps steps after a warm-up per round, --rounds
rounds in alternating order, medians (and the CPU other processes used
meanwhile, "others_cpu" in cores: this machine is shared); the gradients of one step at a fixed
seed compared bit for bit (torch.equal) with store-all's, but for the
parameters whose store-all gradient is not reproducible itself (two
store-all steps at that seed differ there: named in the "none" row); for
rematplan, the measured peak against the budget planned for. Exceptions are
recorded per configuration and the run goes on.

Freed memory stays in the process (--malloc retain, the default: glibc's
mmap and trim off), so steps reuse pages already touched: on this VM a page
faulted in afresh can cost more than the compute, which buried the
differences between configurations. Peaks are PyTorch's allocator count,
which this does not change.

Output: one JSON line per (model, configuration), then a markdown table
(issue 34's targets); --out FILE writes rows, table and environment as JSON.
"""
import argparse
import contextlib
import copy
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234  # the RNG seed of the gradient comparison step (dropout on)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="all", help="comma list (default: all); see --list")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    ap.add_argument("--steps", type=int, help="timed steps per configuration and round (3; --smoke: 1)")
    ap.add_argument("--rounds", type=int, help="rounds, the order of configurations alternating (4; --smoke: 1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=1e9,
                    help="stop adding work (models, plans) when the run would outlast it")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, a quick check that everything runs")
    ap.add_argument("--malloc", default="retain", choices=["retain", "default"],
                    help="retain (default): glibc keeps freed memory in the process (no mmap, no trim), so a "
                         "step reuses pages already touched; default: glibc's own thresholds")
    ap.add_argument("--out")
    a = ap.parse_args()
    a.steps = a.steps if a.steps is not None else (1 if a.smoke else 3)
    a.rounds = a.rounds if a.rounds is not None else (1 if a.smoke else 4)
    return a


# ---- one step, its peak, its gradients, its time -----------------------------------------

def loss_of(out):
    """The loss in a forward's output: a tensor, in a tuple (nanoGPT's (logits, loss)), or .loss."""
    import torch
    if isinstance(out, torch.Tensor):
        return out
    if getattr(out, "loss", None) is not None:
        return out.loss
    return next(t for t in out if isinstance(t, torch.Tensor) and t.dim() == 0)


class Config:
    """One configuration: module (a callable returning the loss) run under ctx; params (the
    nn.Module whose parameters it trains); what is known of it (info, written to its row)."""

    def __init__(self, name, module, params, ctx=None, **info):
        self.name, self.module, self.params = name, module, params
        self.ctx = ctx or contextlib.nullcontext
        self.info = dict(info)
        self.times = []
        self.peak = self.grads = None

    def step(self, *args):
        """One training step as a loop runs it: the output held through the backward."""
        with self.ctx():
            out = self.module(*args)
            loss_of(out).backward()
        del out


def peak_of(torch, c, args):
    """The step's allocator peak above what was allocated before it (rematplan's own measure, so
    every configuration is measured alike)."""
    from rematplan._verify import measure_step

    class Run(torch.nn.Module):  # the configuration's step as a module: its params, its context
        def __init__(self):
            super().__init__()
            self.m = c.params

        def forward(self, *a):
            with c.ctx():
                return c.module(*a)
    return measure_step(Run(), args, "cpu")


def grads_of(torch, c, args):
    """The parameters' gradients of one step at SEED (None where a parameter gets none)."""
    c.params.zero_grad(set_to_none=True)
    torch.manual_seed(SEED)
    c.step(*args)
    out = [None if p.grad is None else p.grad.detach().clone() for p in c.params.parameters()]
    c.params.zero_grad(set_to_none=True)
    return out


def same_grads(torch, a, b, skip=()):
    """Bit for bit: the same parameters get a gradient, and each is torch.equal (but those at the
    indices in skip: store-all's own differ from run to run there)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(i in skip or (x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for i, (x, y) in enumerate(zip(a, b)))


def unreproducible(torch, c, args):
    """The indices of the parameters whose store-all gradient differs between two steps at the same
    seed (a kernel that is not bit-reproducible, such as an embedding's backward accumulating rows
    in parallel): no configuration can be compared bit for bit there."""
    again = grads_of(torch, c, args)
    return {i for i, (x, y) in enumerate(zip(c.grads, again))
            if not ((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y)))}


def timed(configs, args, steps, rounds):
    """--steps timed steps after a warm-up, per configuration and round, the order alternating. A
    configuration that raises is recorded and timed no more."""
    live = list(configs)
    for c in configs:
        c.others = [0.0, 0.0]  # CPU seconds others used while it ran, wall seconds it ran
    for r in range(rounds):
        for c in (list(live) if r % 2 == 0 else live[::-1]):
            try:
                with Others(c.others):
                    c.times += timed_steps(c, args, steps)
            except Exception as e:  # noqa: BLE001
                c.info.update(status="error", error="timing: " + error_text(e))
                live.remove(c)
            c.params.zero_grad(set_to_none=True)


def timed_steps(c, args, steps):
    """A warm-up step, then `steps` timed ones (ms), each from .grad set to None."""
    times = []
    for k in range(steps + 1):
        c.params.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        c.step(*args)
        if k:
            times.append((time.perf_counter() - t0) * 1e3)
    return times


class Others:
    """Adds to acc the CPU seconds other processes used while the block ran, and its wall seconds:
    this machine is shared, and a process outside the lock stalls the step's threads (the times
    of a configuration with others' CPU near a core are suspect)."""

    def __init__(self, acc):
        self.acc = acc

    @staticmethod
    def busy():
        """(all processes' CPU seconds, this process's)."""
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return 0.0, 0.0
        busy = sum(v) - v[3] - (v[4] if len(v) > 4 else 0)  # less idle and iowait
        t = os.times()
        return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system

    def __enter__(self):
        self.t0, self.b0 = time.perf_counter(), self.busy()

    def __exit__(self, *exc):
        b1 = self.busy()
        self.acc[0] += max((b1[0] - self.b0[0]) - (b1[1] - self.b0[1]), 0.0)
        self.acc[1] += time.perf_counter() - self.t0


# ---- the configurations ------------------------------------------------------------------

def error_text(e):
    """An exception as the row records it: its type, message and where it was raised."""
    tb = traceback.extract_tb(e.__traceback__)
    where = "%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else "?"
    return "%s: %s (at %s)" % (type(e).__name__, str(e).strip().split("\n")[0][:400], where)


def per_layer_config(spec):
    if spec.per_layer is None:
        return Config("per-layer", None, None, status="not available", why=spec.per_layer_why)
    return Config("per-layer", spec.model, spec.model, ctx=spec.per_layer, status="ok", how=spec.per_layer_how)


def plan_config(torch, name, spec, args, budget, want_bytes, pristine):
    """rematplan at budget (bytes or a fraction) on a fresh copy of the model: the applied model, or,
    refused, the plan at the least the refusal names."""
    import rematplan
    model = copy.deepcopy(pristine)
    info = {"budget_asked": budget, "budget_asked_bytes": want_bytes}
    t0 = time.perf_counter()
    try:
        P = rematplan.plan(model, args, budget, verbose=False)
        info.update(status="planned", plan_s=round(time.perf_counter() - t0, 2))
    except rematplan.BudgetError as e:
        info.update(status="refused", plan_s=round(time.perf_counter() - t0, 2), least_bytes=e.least_bytes,
                    refusal=str(e)[:300])
        t1 = time.perf_counter()
        P = rematplan.plan(model, args, e.least_bytes, verbose=False)
        info["plan_least_s"] = round(time.perf_counter() - t1, 2)
    info.update(plan_budget_bytes=getattr(P, "budget_bytes", None), predicted_peak=getattr(P, "peak_bytes", None),
                planner=getattr(P, "planner", None), regions=P.n_regions() if hasattr(P, "n_regions") else None,
                recomputed=P.n_recomputed() if hasattr(P, "n_recomputed") else None,
                predicted_step_ms=getattr(P, "predicted_step_ms", None),
                plan_measured_peak=getattr(P, "measured_peak", None))
    # the budget the measured plan was made for: the asked one, or the least when refused
    info["budget_bytes"] = info.get("least_bytes") or want_bytes
    return Config(name, rematplan.apply(model, P), model, **info)


def try_config(make, name):
    """A configuration from make(), or one that records the exception make() raised."""
    try:
        return make()
    except Exception as e:  # noqa: BLE001: any failure of rematplan is a finding, not the end of the run
        return Config(name, None, None, status="error", error=error_text(e))


def measured(torch, c, args, ref):
    """The configuration's peak and gradients, compared with ref's (store-all's; None for store-all
    itself); an exception is recorded and the configuration left out of the timing."""
    if c.module is None:
        return False
    try:
        c.peak = peak_of(torch, c, args)
        c.grads = grads_of(torch, c, args)
        if ref is not None:
            c.info["grads_bit_equal"] = same_grads(torch, c.grads, ref.grads, ref.skip)
            c.grads = None  # only store-all's are kept
        return True
    except Exception as e:  # noqa: BLE001
        c.info.update(status="error", error=error_text(e))
        return False


def store_all(torch, spec, args):
    """The store-all configuration, measured; its gradients kept, and where they do not reproduce."""
    none = Config("none", spec.model, spec.model, status="ok")
    none.skip = set()
    if measured(torch, none, args, None):
        none.skip = unreproducible(torch, none, args)
        names = [n for n, _ in spec.model.named_parameters()]
        none.info["grads_reproducible"] = not none.skip
        if none.skip:
            none.info["unreproducible_grads"] = [names[i] for i in sorted(none.skip)]
    return none


def remat_config(torch, name, spec, args, budget, want, pristine, none, left):
    """A rematplan configuration planned, applied and measured (or why not)."""
    if left() <= 0:
        return Config(name, None, None, status="skipped", why="--max-seconds")
    c = try_config(lambda: plan_config(torch, name, spec, args, budget, want, pristine), name)
    if measured(torch, c, args, none):
        c.info["within_budget"] = c.peak <= c.info["budget_bytes"]
    return c


def least_config(torch, spec, args, full, pristine, none, left, done):
    """The least budget rematplan names: from a refusal already made (that configuration was planned
    at it and measured), else from planning at 0.01 of store-all (measured, not timed)."""
    refused = next((c for c in done if c.info.get("status") == "refused" and c.peak is not None), None)
    if refused is None:
        return remat_config(torch, "remat@least", spec, args, 0.01, int(0.01 * full), pristine, none, left)
    c = Config("remat@least", None, None, status="refused", source=refused.name + "'s refusal")
    c.peak = refused.peak
    for k in ("least_bytes", "budget_bytes", "within_budget", "grads_bit_equal", "plan_budget_bytes",
              "predicted_peak", "plan_measured_peak", "planner", "regions", "recomputed", "predicted_step_ms"):
        if k in refused.info:
            c.info[k] = refused.info[k]
    return c


def run_model(torch, a, spec, left):
    """Every configuration of one model, measured and timed: its rows."""
    args = spec.inputs
    pristine = copy.deepcopy(spec.model)  # what each rematplan configuration copies: nothing applied
    none = store_all(torch, spec, args)
    configs = [none, per_layer_config(spec)]
    if none.peak is None:
        return rows_of(spec, configs)
    ok = [none] + [c for c in configs[1:] if measured(torch, c, args, none)]
    full, layer = none.peak, configs[1].peak
    plans = [("remat@0.5", 0.5, int(0.5 * full))]
    if layer is not None:
        plans.insert(0, ("remat@per-layer", layer, layer))
    for name, budget, want in plans:
        c = remat_config(torch, name, spec, args, budget, want, pristine, none, left)
        configs.append(c)
        if c.peak is not None:
            ok.append(c)
    configs.append(least_config(torch, spec, args, full, pristine, none, left, configs[2:]))
    timed(ok, args, a.steps, a.rounds)
    return rows_of(spec, configs)


def rows_of(spec, configs):
    """One JSON row per configuration: times and peaks also as ratios of store-all's."""
    base = configs[0]
    base_ms = statistics.median(base.times) if base.times else None
    rows = []
    for c in configs:
        row = {"model": spec.name, "config": c.name, "shape": spec.shape}
        if c.times:
            row["step_ms"] = round(statistics.median(c.times), 2)
            row["x_time"] = round(row["step_ms"] / base_ms, 3) if base_ms else None
            row["min_ms"] = round(min(c.times), 2)
            row["times_ms"] = [round(t, 1) for t in c.times]
            if getattr(c, "others", [0, 0])[1]:
                row["others_cpu"] = round(c.others[0] / c.others[1], 2)  # cores' worth, mean
        if c.peak is not None:
            row["peak_bytes"] = c.peak
            row["x_peak"] = round(c.peak / base.peak, 4) if base.peak else None
        row.update(c.info)
        rows.append(row)
    return rows


# ---- the summary table -------------------------------------------------------------------

def fmt(x, spec="%.3f"):
    return "-" if x is None else spec % x


def summary_row(rows):
    """One model's line of the table (issue 34's targets, each with its figures)."""
    by = {r["config"]: r for r in rows}
    none, layer = by.get("none", {}), by.get("per-layer", {})
    at_layer, half, least = by.get("remat@per-layer", {}), by.get("remat@0.5", {}), by.get("remat@least", {})
    full, full_ms = none.get("peak_bytes"), none.get("step_ms")
    least_b = least.get("least_bytes") or (least.get("budget_bytes") if least.get("status") == "planned" else None)
    least_x = least_b / full if least_b and full else None
    layer_peak = layer.get("peak_bytes")
    layer_ms = layer.get("step_ms")

    def ratio(r, ref):
        return r.get("step_ms") / ref if r.get("step_ms") and ref else None

    def tag(r):  # how the rematplan configuration went
        return {"planned": "", "refused": " (refused)", "error": " (error)",
                "skipped": " (skipped)"}.get(r.get("status"), "")
    remats = [r for r in (at_layer, half, least) if r]
    equal = [r.get("grads_bit_equal") for r in [layer] + remats if "grads_bit_equal" in r]
    within = [r.get("within_budget") for r in remats if "within_budget" in r]
    plan_s = "/".join(fmt(r.get("plan_s"), "%.1f") for r in (at_layer, half, least))
    unrepro = " (%d not reproducible in store-all itself)" % len(none["unreproducible_grads"]) \
        if none.get("unreproducible_grads") else ""
    layer_reaches = layer_peak is not None and full and layer_peak <= 0.5 * full
    cells = [
        rows[0]["model"],
        "%.2f MB" % (full / 1e6) if full else "-", fmt(full_ms, "%.0f"),
        ("%s, %s" % (fmt(layer_peak / full), fmt(layer_ms / full_ms if layer_ms and full_ms else None, "%.2fx")))
        if layer_peak and full else "n/a: " + layer.get("why", layer.get("error", "?"))[:60],
        fmt(least_x) + tag(least) if least else "-",
        ("yes" if least_b <= layer_peak else "**no**") if least_b and layer_peak else "-",
        fmt(ratio(at_layer, layer_ms), "%.2fx") + tag(at_layer) if at_layer else "-",
        fmt(ratio(half, full_ms), "%.2fx") + tag(half) + ("" if layer_reaches else " (per-layer > 0.5)")
        if half else "-",
        ("yes" if equal and all(equal) else ("**no**" if equal else "-")) + unrepro,
        "yes" if within and all(within) else ("**no**" if within else "-"),
        plan_s]
    return "| " + " | ".join(cells) + " |"


TABLE_HEAD = [
    "| model | store-all peak | store-all ms | per-layer: peak, ms (x store-all) | remat least (x store-all) "
    "| least <= per-layer peak | remat@per-layer ms / per-layer ms (<= 0.9) | remat@0.5 ms / store-all ms (<= 1.10) "
    "| grads bit-equal | measured peak <= budget | plan() s (@per-layer/@0.5/@least) |",
    "|---|---|---|---|---|---|---|---|---|---|---|"]


def summary_table(all_rows):
    models = []
    for r in all_rows:
        if r["model"] not in models:
            models.append(r["model"])
    return "\n".join(TABLE_HEAD + [summary_row([r for r in all_rows if r["model"] == m]) for m in models])


# ---- the run -----------------------------------------------------------------------------

def environment(torch, a):
    """What the figures depend on: versions, processor, threads, the commit measured."""
    env = {"torch": torch.__version__, "threads": torch.get_num_threads(), "steps": a.steps, "rounds": a.rounds,
           "smoke": a.smoke}
    for mod in ("transformers", "torchvision", "peft"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    try:
        cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        info = dict(line.split(":", 1) for line in cpu.splitlines() if ":" in line)
        env["cpu"] = info.get("Model name", "?").strip()
        env["avx512"] = sorted(f for f in info.get("Flags", "").split() if f.startswith("avx512"))
        git = ["git", "-C", HERE, "log", "-1", "--format=%h %s"]
        env["commit"] = subprocess.run(git, capture_output=True, text=True).stdout.strip()[:100]
    except OSError:
        pass
    return env


def retain_freed_memory():
    """glibc hands large blocks back to the kernel when they are freed (mmap, trim), so every step
    faults its activations in afresh. On this VM a freshly faulted page can cost far more than the
    compute (steps of 2 s where 0.1 s is the norm, after the host took the freed pages back), which
    buries the differences between configurations: freed memory is kept in the process instead, for
    every configuration alike. The peaks are PyTorch's allocator count, which this does not change."""
    import ctypes
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 40))


def main():
    a = parse()
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(k, None)
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # above USDT: the profiler (peaks) logs every start and stop
    retained = retain_freed_memory() if a.malloc == "retain" else False
    sys.path.insert(0, HERE)
    import torch_models_zoo as zoo
    if a.list:
        print("\n".join(zoo.NAMES))
        return 0
    import torch
    torch.set_num_threads(a.threads)
    zoo.quiet()
    names = zoo.NAMES if a.models == "all" else [m for m in a.models.split(",") if m]
    unknown = [m for m in names if m not in zoo.NAMES]
    if unknown:
        sys.exit("torch_models.py: unknown models %s (known: %s)" % (unknown, ",".join(zoo.NAMES)))
    t_start = time.perf_counter()
    env = environment(torch, a)
    env["malloc"] = "retain (M_MMAP_MAX 0, M_TRIM_THRESHOLD 1 TiB)" if retained else "glibc default"
    print(json.dumps({"environment": env}), flush=True)
    all_rows, took = [], []
    for name in names:
        elapsed = time.perf_counter() - t_start
        if took and elapsed + statistics.mean(took) > a.max_seconds:
            all_rows.append({"model": name, "config": "none", "status": "skipped", "why": "--max-seconds"})
            print(json.dumps(all_rows[-1]), flush=True)
            continue
        t0 = time.perf_counter()
        rows = one_model(torch, a, zoo, name, lambda: a.max_seconds - (time.perf_counter() - t_start))
        took.append(time.perf_counter() - t0)
        for r in rows:
            r["model_s"] = round(took[-1], 1)
            print(json.dumps(r), flush=True)
        all_rows += rows
    table = summary_table(all_rows)
    print(table)
    seconds = round(time.perf_counter() - t_start, 1)
    print(json.dumps({"seconds": seconds}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"environment": env, "seconds": seconds, "rows": all_rows, "table": table}, f, indent=1)
    return 0


def one_model(torch, a, zoo, name, left):
    """One model's rows; a model that cannot be built or measured is a row saying why."""
    try:
        spec = zoo.build(torch, name, a.smoke)
    except Exception as e:  # noqa: BLE001
        return [{"model": name, "config": "none", "status": "error", "error": "building: " + error_text(e)}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers 5.x: gradient_checkpointing_enable's alias
        return run_model(torch, a, spec, left)


if __name__ == "__main__":
    sys.exit(main())
