#!/usr/bin/python3
"""torch_tradeoff.py: PyTorch's side of `remat bench`, as a CSV with remat
bench's columns, so that `remat bench --compare FILE.csv` draws both on one
chart.

The same GPT, shapes, seed and threads as remat (bench/bench_torch.py:
nanoGPT layout, fp32, AdamW, clipping 1.0, no dropout). Each configuration
runs as its own process (its peak RSS is its own), in alternating order over
--rounds rounds (every other round reversed), like remat bench:

  torch:none                      no checkpointing
  torch:block-reentrant           checkpoint() per block, use_reentrant=True
  torch:block                     checkpoint() per block, use_reentrant=False
  torch:sequential:K              checkpoint_sequential's split into K segments
                                  (K from --segments, default 2 and 4)
  torch:selective                 checkpoint of each block's attention core and
                                  GELU (what 1.13 allows per op)

PyTorch cannot report the bytes of its saved activations on the CPU, so
activation_bytes_* are left empty and the chart places these points by
peak_rss_bytes (which includes ~230 MB of Python and torch libraries).
overhead_measured is against torch:none; overhead_predicted is empty.

Usage:
  /usr/bin/python3 bench/torch_tradeoff.py --layers 2 --dim 64 --heads 4 --context 32 \\
      --batch 4 --threads 2 --steps 5 --csv torch.csv
  build/remat bench --layers 2 --dim 64 --heads 4 --context 32 --batch 4 --threads 2 \\
      --steps 5 --svg chart.svg --compare torch.csv
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = ("config,strategy,budget_bytes,activation_bytes_planned,activation_bytes_measured,peak_rss_bytes,"
           "step_ms_median,step_ms_min,step_ms_max,overhead_measured,overhead_predicted,source,label")


def parse():
    ap = argparse.ArgumentParser(description="PyTorch points for remat bench --compare")
    for name, default in (("layers", 4), ("dim", 128), ("heads", 4), ("context", 64), ("vocab", 256), ("batch", 8),
                          ("threads", os.cpu_count() or 1), ("steps", 5), ("warmup", 1), ("rounds", 2),
                          ("seed", 1337)):
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--segments", default="2,4", help="checkpoint_sequential segment counts")
    ap.add_argument("--csv", required=True)
    return ap.parse_args()


def configs(a):
    out = [("torch:none", ["--checkpoint", "none"]),
           ("torch:block-reentrant", ["--checkpoint", "block", "--reentrant"]),
           ("torch:block", ["--checkpoint", "block"]),
           ("torch:selective", ["--checkpoint", "selective"])]
    for k in a.segments.split(","):
        if k and int(k) <= a.layers:
            out.append(("torch:sequential:%s" % k, ["--checkpoint", "sequential", "--segments", k]))
    return out


def run_one(a, extra):
    cmd = [sys.executable, os.path.join(HERE, "bench_torch.py")]
    for name in ("layers", "dim", "heads", "context", "vocab", "batch", "threads", "steps", "warmup", "seed"):
        cmd += ["--" + name, str(getattr(a, name))]
    r = subprocess.run(cmd + extra, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "exit %d" % r.returncode)
    return json.loads(r.stdout)


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def main():
    a = parse()
    cfgs = configs(a)
    runs = {name: [] for name, _ in cfgs}
    total = len(cfgs) * a.rounds
    done = 0
    for r in range(a.rounds):
        for name, extra in (cfgs if r % 2 == 0 else cfgs[::-1]):
            try:
                runs[name].append(run_one(a, extra))
            except RuntimeError as e:
                print("torch_tradeoff: %s failed: %s" % (name, e), file=sys.stderr)
            done += 1
            print("torch_tradeoff: %d/%d done (%s)" % (done, total, name), file=sys.stderr)
    config = "gpt L%d C%d H%d T%d V%d B%d" % (a.layers, a.dim, a.heads, a.context, a.vocab, a.batch)
    none = median([x["step_ms_median"] for x in runs["torch:none"]]) if runs["torch:none"] else None
    with open(a.csv, "w") as f:
        f.write(COLUMNS + "\n")
        for name, _ in cfgs:
            rs = runs[name]
            if not rs:
                continue
            med = median([x["step_ms_median"] for x in rs])
            ovh = "%.4f" % (med / none - 1) if none else ""
            f.write("%s,%s,0,,,%d,%.3f,%.3f,%.3f,%s,,pytorch %s,%s\n" % (
                config, name, max(x["peak_rss_bytes"] for x in rs), med, min(x["step_ms_min"] for x in rs),
                max(x["step_ms_max"] for x in rs), ovh, rs[0]["torch_version"].split("+")[0], name))
    print("torch_tradeoff: wrote %s" % a.csv, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
