#!/usr/bin/python3
"""torch_lora.py: remat's LoRA (issue 21) against PyTorch, for a small
LLaMA in Hugging Face's layout (tests/torch_models.py's).

Usage: /usr/bin/python3 tests/torch_lora.py --remat build/remat [--keep DIR] [--verbose]

A base model with random weights is written as a .safetensors file; remat
fine-tunes it with LoRA (r 4, alpha 8, on all seven projections, AdamW with
weight decay and clipping, 5 steps), writes the PEFT folder
(--save-adapters) and the merged model (remat export --merge-lora). Here:
  1. the same 5 steps in PyTorch, LoRA written by hand as PEFT computes it
     (x W^T + alpha/r B(A(x)), base requires_grad False), from the adapters
     remat initialised (a --steps 0 run): every adapter within 5e-5
     (torch_crosscheck.py's AdamW tolerance), the base bit-unchanged, the
     last training loss and the validation loss within 1e-5;
  2. the PEFT folder: keys base_model.model.<name>.lora_A/B.weight with the
     run's values, adapter_config.json with PEFT's fields, and the model it
     describes (base + adapters, applied here as PEFT's LoraLayer does)
     gives remat's validation loss;
  3. the merged file: LlamaForCausalLM's names and no adapters, each
     adapted weight W + alpha/r B A, and its logits those of base +
     adapters (1e-5 relative) and its validation loss remat's.
Printed last: "test_torch_lora: N passed, N failed".
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_crosscheck as tc  # noqa: E402
import torch_models as tm  # noqa: E402  (registers llama in tc.MODELS)

CFG = {"model": "llama", "layers": 2, "dim": 32, "heads": 4, "context": 16, "vocab": 256, "batch": 4}
# AdamW's eps 1e-6, not 1e-8: B starts at zero, so A's first gradient comes
# at step 2 and its first update is m/(sqrt(v) + eps) ~ sign(g) lr for any
# |g| >> eps: elements of A whose gradient nearly cancels move by a share
# of lr that float32 rounding decides. At eps 1e-8 PyTorch's float32 and
# float64 replays differ by 7.4e-5 (over the 5e-5 tolerance); at 1e-6 by 4.7e-6.
OPT = {"steps": 5, "val_fraction": 0.1, "text_bytes": 1500, "optimizer": "adamw", "lr": 1e-2, "eps": 1e-6,
       "weight_decay": 0.1, "grad_clip": 1.0,
       # the base, frozen: every parameter but the adapters
       "freeze": "model.embed_tokens,model.norm,lm_head,*layernorm*,*_proj.weight"}
RANK, ALPHA = 4, 8.0
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PEFT = "base_model.model."


def lora_lin(P, scale):
    """PEFT's LoraLayer.forward for the weights that have adapters."""
    def lin(x, name):
        y = F.linear(x, P[name])
        m = name[:-len(".weight")]
        if m + ".lora_A.weight" in P:
            y = y + F.linear(F.linear(x, P[m + ".lora_A.weight"]), P[m + ".lora_B.weight"]) * scale
        return y
    return lin


def lora_loss(P, idx, tgt, cfg):
    return tm.llama_loss(P, idx, tgt, cfg, lora_lin(P, ALPHA / RANK))


def val_loss(P, val, lin):
    with torch.no_grad():
        n = tc.lm_val_batches(val, CFG)
        losses = []
        for k in range(n):
            idx, tgt = tc.gpt_batch(val, k, CFG, torch.float64)
            logits = tm.llama_logits(P, idx, CFG, lin)
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)).item())
    return sum(losses) / len(losses)


def remat(args, checks, what, verbose):
    if verbose:
        print("  $ " + " ".join(args))
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if r.returncode != 0:
        checks.report(False, what, "exit %d: %s" % (r.returncode, r.stdout.decode(errors="replace").strip()))
    return r.returncode == 0


def check_training(checks, base, init, out, rep, train, val, names):
    """1: the 5 steps against PyTorch's."""
    tc.MODELS["llama_lora"] = dict(tc.MODELS["llama"], loss=lora_loss)
    start = list(base.items()) + [(n, init[n]) for n in names]
    cfg = dict(CFG, model="llama_lora")
    t32, loss32, val32, norms = tc.replay(start, cfg, OPT, train, val, torch.float32)
    t64, _, _, _ = tc.replay(start, cfg, OPT, train, val, torch.float64)
    clipped = sum(1 for n in norms if n > OPT["grad_clip"])
    worst, where, noise, moved = 0.0, "", 0.0, np.inf
    for n in names:
        d = float(np.abs(out[n].astype(np.float64) - t32[n]).max())
        if d > worst:
            worst, where = d, n
        noise = max(noise, float(np.abs(t32[n] - t64[n]).max()))
        moved = min(moved, float(np.abs(t64[n] - init[n]).max()))
    checks.report(worst <= tc.PARAM_TOL["adamw"] and len(names) == 2 * 7 * CFG["layers"],
                  "adapters after 5 AdamW steps",
                  "%d adapters, max|remat-torch32| %.2e in %s (tol 5e-05); fp32 noise %.2e; smallest max update "
                  "%.2e; clipping in %d of 5 steps" % (len(names), worst, where, noise, moved, clipped))
    same = [n for n in base if n in out and np.array_equal(out[n], base[n])]
    checks.report(len(same) == len(base), "frozen base bit-unchanged", "%d of %d tensors" % (len(same), len(base)))
    fl, vl = rep.get("final_loss"), rep.get("val_loss")
    checks.report(abs(fl - loss32) <= tc.LOSS_TOL and abs(vl - val32) <= tc.LOSS_TOL, "losses",
                  "final remat %.6f torch %.6f, val remat %.6f torch %.6f (tol 1e-05)" % (fl, loss32, vl, val32))


def check_peft(checks, base, out, rep, val, names, folder):
    """2: the PEFT folder, and the model it describes."""
    ad, meta = tc.st_read(os.path.join(folder, "adapter_model.safetensors"))
    keys_ok = sorted(ad) == sorted(PEFT + n for n in names)
    vals_ok = keys_ok and all(np.array_equal(ad[PEFT + n], out[n]) for n in names)
    with open(os.path.join(folder, "adapter_config.json")) as f:
        c = json.load(f)
    want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0,
            "bias": "none", "fan_in_fan_out": False, "target_modules": TARGETS}
    bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
    checks.report(keys_ok and vals_ok and not bad and meta.get("format") == "pt", "PEFT folder",
                  "%d tensors named %s..., values %s, config %s" %
                  (len(ad), sorted(ad)[0] if ad else "-", "the run's" if vals_ok else "differ",
                   "as PEFT's" if not bad else "differs: %s" % bad))
    P = {n: torch.tensor(a, dtype=torch.float64) for n, a in base.items()}
    P.update({k[len(PEFT):]: torch.tensor(a, dtype=torch.float64) for k, a in ad.items()})
    v = val_loss(P, val, lora_lin(P, c["lora_alpha"] / c["r"]))
    checks.report(abs(v - rep["val_loss"]) <= tc.LOSS_TOL, "base + PEFT folder",
                  "val loss %.6f, remat's %.6f (tol 1e-05)" % (v, rep["val_loss"]))
    return P


def check_merged(checks, base, out, rep, val, path, lora_P):
    """3: the merged model."""
    m, _ = tc.st_read(path)
    names_ok = sorted(m) == sorted(base)
    worst = 0.0
    for n in base:
        mod = n[:-len(".weight")]
        want = out[n].astype(np.float64)
        if mod + ".lora_A.weight" in out:
            want = want + ALPHA / RANK * out[mod + ".lora_B.weight"].astype(np.float64) @ \
                out[mod + ".lora_A.weight"].astype(np.float64)
        if n in m:
            worst = max(worst, float(np.abs(m[n] - want).max()))
    checks.report(names_ok and worst < 1e-6, "merged weights",
                  "%d tensors (LlamaForCausalLM's names: %s), max|merged - (W + s B A)| %.2e" %
                  (len(m), names_ok, worst))
    P = {n: torch.tensor(a, dtype=torch.float64) for n, a in m.items()}
    idx, _ = tc.gpt_batch(val, 0, CFG, torch.float64)
    with torch.no_grad():
        merged = tm.llama_logits(P, idx, CFG)
        lora = tm.llama_logits(lora_P, idx, CFG, lora_lin(lora_P, ALPHA / RANK))
    rel = float(((merged - lora).abs() / (1 + lora.abs())).max())
    v = val_loss(P, val, None)
    checks.report(rel <= 1e-5 and abs(v - rep["val_loss"]) <= tc.LOSS_TOL, "merged model in PyTorch",
                  "logits vs base + adapters %.2e (tol 1e-05), val loss %.6f, remat's %.6f" % (rel, v, rep["val_loss"]))


def main():
    import argparse
    import tempfile
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", required=True)
    ap.add_argument("--keep")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    checks = tc.Checks()
    work = a.keep or tempfile.mkdtemp(prefix="remat_torch_lora.")
    os.makedirs(work, exist_ok=True)
    text, train, val = tc.text_data("lora", OPT)
    data, base_path = os.path.join(work, "data.txt"), os.path.join(work, "base.safetensors")
    with open(data, "wb") as f:
        f.write(text)
    base = dict(tm.random_init(tm.llama_shapes(CFG), 1234))
    tc.st_write(base_path, list(base.items()), {"format": "pt"})
    args = [a.remat, "train", "--init", base_path, "--data", data, "--quiet", "--lora", str(RANK), "--lora-alpha",
            repr(ALPHA), "--lora-dropout", "0"] + tc.remat_args(CFG, dict(OPT, freeze=None))
    p = {k: os.path.join(work, k) for k in ("init.st", "out.st", "report.json", "adapters", "merged.st")}
    ok = remat(args + ["--steps", "0", "--save", p["init.st"]], checks, "remat train --steps 0", a.verbose) and \
        remat(args + ["--save", p["out.st"], "--report", p["report.json"], "--save-adapters", p["adapters"]],
              checks, "remat train --lora", a.verbose) and \
        remat([a.remat, "export", "--load", p["out.st"], "--merge-lora", "--out", p["merged.st"]], checks,
              "remat export --merge-lora", a.verbose)
    if ok:
        init, _ = tc.st_read(p["init.st"])
        out, _ = tc.st_read(p["out.st"])
        with open(p["report.json"]) as f:
            rep = json.load(f)
        names = [n for n in out if ".lora_" in n and not n.startswith("optimizer.")]
        bound = max(float(np.abs(init[n]).max()) for n in names if ".lora_A." in n)
        zero = all(not init[n].any() for n in names if ".lora_B." in n)
        checks.report(zero and 0.1 < bound <= 1 / np.sqrt(CFG["dim"]), "initial adapters",
                      "B zero %s, max|A| %.4f (Kaiming-uniform bound 1/sqrt(32) = %.4f)" %
                      (zero, bound, 1 / np.sqrt(CFG["dim"])))
        check_training(checks, base, init, out, rep, train, val, names)
        lora_P = check_peft(checks, base, out, rep, val, names, p["adapters"])
        check_merged(checks, base, out, rep, val, p["merged.st"], lora_P)
    print("test_torch_lora: %d passed, %d failed" % (checks.passed, checks.failed))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
