"""How long rematplan.plan() takes, and how many full steps of the model it
runs (issue 34: "plan() < 5 s per model, refusals included").

For each model (bench/torch_models_zoo.py's, random weights, train mode),
in a child process per (round, package, model), each case on a fresh copy
of the model (no profile kept from another case):
  - first: plan() at 0.5, the process's first call (it also measures the
    op rates, pricing.py, once per process): timed apart;
  - refusal: a budget of 1000 bytes (BudgetError naming the least);
  - 0.5: half of the measured store-all step;
  - least: the least the refusal named, on a fresh copy;
  - least-again: the refusal, then its least on the same model object (the
    profile reused, as bench/torch_models.py and users do): the second call.
Steps are counted by a forward pre-hook on the model's top module, split by
who called it: plain (warm-up, measured and timed store-all steps), the
lifetimes forward (none since the recorded pass sees the lifetimes itself),
the recorded (captured) pass, an applied plan's step.

Two packages alternate (--before DIR --after DIR: folders that hold a
`rematplan` package), round by round, the order swapped every round; the
table gives medians. Example:

  cp -r python/rematplan /tmp/before/   # (at the commit before the change)
  make build/libremat.so
  REMAT_LIBRARY=$PWD/build/libremat.so python3 bench/plan_time.py \
      --before /tmp/before --after python --models nanogpt,mlp,convnext --rounds 3
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ("first", "refusal", "0.5", "least", "least-again")
KINDS = ("plain", "lifetimes", "capture", "applied")


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="folder holding the old rematplan package")
    ap.add_argument("--after", default=os.path.join(HERE, "..", "python"), help="folder holding the new one")
    ap.add_argument("--models", default="nanogpt,mlp,convnext,mobilenetv3")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="the zoo's tiny shapes (counts, not seconds)")
    ap.add_argument("--no-retain", action="store_true",
                    help="leave glibc's freed memory handling as it is (bench/torch_models.py retains it)")
    ap.add_argument("--out", help="JSON file for every run")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # package folder, in the child
    ap.add_argument("--model", help=argparse.SUPPRESS)
    return ap.parse_args()


def kind_of_call():
    """Who runs this forward: an applied plan's step, the capture's passes, or a plain step."""
    f = sys._getframe(2)
    while f is not None:
        name, self = f.f_code.co_name, f.f_locals.get("self")
        if name == "forward" and type(self).__name__ == "RematModel":
            return "applied"
        if name == "lifetimes":
            return "lifetimes"
        if name == "one_pass":
            return "capture"
        f = f.f_back
    return "plain"


def child(a):
    sys.path.insert(0, a.child)
    sys.path.insert(0, HERE)
    import torch
    import rematplan
    import torch_models_zoo as zoo
    from rematplan.capture import loss_of
    from torch_models import retain_freed_memory
    assert os.path.abspath(rematplan.__file__).startswith(os.path.abspath(a.child)), rematplan.__file__
    torch.set_num_threads(a.threads)
    if not a.no_retain:
        retain_freed_memory()
    zoo.quiet()
    spec = zoo.build(torch, a.model, a.smoke)
    pristine, args = copy.deepcopy(spec.model), spec.inputs

    def counted(model):
        counts = {k: 0 for k in KINDS}

        def hook(module, inputs):
            counts[kind_of_call()] += 1
        model.register_forward_pre_hook(hook)
        return counts

    def run(model, budget):
        counts = counted(model)
        t0 = time.perf_counter()
        out = {"budget": budget}
        try:
            P = rematplan.plan(model, args, budget, verbose=False)
            out.update(status="planned", measured_peak=P.measured_peak, store_all=P.store_all_bytes,
                       predicted_step_ms=getattr(P, "predicted_step_ms", None), least=P.least_bytes)
        except rematplan.BudgetError as e:
            out.update(status="refused", least=e.least_bytes, store_all=e.store_all_bytes)
        out["s"] = time.perf_counter() - t0
        out["counts"] = dict(counts)
        out["forwards"] = sum(counts.values())
        return out

    # the process's own lazy start (imports, thread pools) is not plan()'s: one plain step first
    warm = copy.deepcopy(pristine)
    out = warm(*args)
    loss_of(out).backward()
    del warm, out
    res = {"model": a.model, "package": a.child, "torch": torch.__version__, "threads": torch.get_num_threads()}
    res["first"] = run(copy.deepcopy(pristine), 0.5)
    res["refusal"] = run(copy.deepcopy(pristine), 1000)
    least = res["refusal"].get("least")
    res["0.5"] = run(copy.deepcopy(pristine), 0.5)
    res["least"] = run(copy.deepcopy(pristine), least)
    m = copy.deepcopy(pristine)
    run(m, 1000)
    res["least-again"] = run(m, least)
    print("RESULT " + json.dumps(res))


def main():
    a = parse()
    if a.child:
        return child(a)
    variants = [("before", a.before), ("after", a.after)] if a.before else [("after", a.after)]
    runs = []
    for r in range(a.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name in a.models.split(","):
            for label, pkg in order:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", os.path.abspath(pkg), "--model", name,
                       "--threads", str(a.threads)] + (["--smoke"] if a.smoke else []) + \
                    (["--no-retain"] if a.no_retain else [])
                t0 = time.perf_counter()
                p = subprocess.run(cmd, capture_output=True, text=True)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                if p.returncode != 0 or not line:
                    print("%s %s round %d failed:\n%s" % (name, label, r, (p.stdout + p.stderr)[-3000:]), flush=True)
                    continue
                res = json.loads(line[-1][7:])
                res["variant"], res["round"] = label, r
                runs.append(res)
                print("round %d %-12s %-6s %5.1f s: %s" % (r, name, label, time.perf_counter() - t0, "  ".join(
                    "%s %.2fs/%d" % (c, res[c]["s"], res[c]["forwards"]) for c in CASES)), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(runs, f, indent=1)
    report(runs, a.models.split(","), [v for v, _ in variants])


def report(runs, models, variants):
    print("\nmedians over rounds: plan() seconds / forwards of the model (plain+lifetimes+capture+applied)")
    print("| model | case | " + " | ".join("%s s | %s forwards" % (v, v) for v in variants) + " |")
    print("|---|---|" + "---|---|" * len(variants))
    for m in models:
        for c in CASES:
            cells = []
            for v in variants:
                rs = [r[c] for r in runs if r["model"] == m and r["variant"] == v and c in r]
                if not rs:
                    cells += ["-", "-"]
                    continue
                s = statistics.median(x["s"] for x in rs)
                k = rs[0]["counts"]
                fw = "%d (%s)" % (rs[0]["forwards"], "+".join(str(k[x]) for x in KINDS))
                if len({x["forwards"] for x in rs}) > 1:
                    fw += " varies: %s" % sorted({x["forwards"] for x in rs})
                cells += ["%.2f" % s, fw + ("" if rs[0]["status"] == "planned" else " refused")]
            print("| %s | %s | %s |" % (m, c, " | ".join(cells)))


if __name__ == "__main__":
    main()
