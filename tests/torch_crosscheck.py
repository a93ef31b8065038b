#!/usr/bin/python3
"""torch_crosscheck.py: trains tiny models with `remat train` and replays the
same steps in PyTorch, then compares every saved parameter and the losses.

Usage: /usr/bin/python3 tests/torch_crosscheck.py --remat build/remat [--keep DIR] [--verbose]

Each scenario:
  1. builds the model in PyTorch and initialises it here (every tensor random,
     layernorm gains and biases too, so that a wrong gradient of any of them
     shows);
  2. writes the weights to a .safetensors file (nanoGPT / remat names; the
     tied lm_head is not stored) and a small text file (bytes = tokens);
  3. runs `remat train --init FILE --sampler sequential ... --save OUT
     --report REP` for a few steps;
  4. replays the same steps in PyTorch on the same batches (the sequential
     sampler and the train/validation split of src/train/data.c), in float32
     and, as the reference for the rounding noise, in float64;
  5. compares every tensor of OUT with PyTorch's float32 result (one check),
     the final training loss (one check) and the validation loss that remat
     computes after training (one check).

Tolerances (all absolute, float32 through the whole run, 5 steps):
  * parameters after SGD (lr 0.1): 1e-5. The gradients agree to ~1e-7
    relative (fp32 round-off of sums of at most 4C = 128 or B*T = 64 terms,
    summed in another order by OpenBLAS and by PyTorch), so the parameters
    agree to ~1e-7: observed max |remat - torch32| ~1e-7, and the float64
    replay puts PyTorch's own fp32 error at ~2e-7 ("fp32 noise", printed).
    A real bug moves some parameter by about the size of an update, which
    each check prints too (smallest per-tensor max update, >= 1e-3 here).
  * parameters after AdamW (lr 1e-3): 5e-5. Adam divides each gradient by
    its own running RMS, so an element whose gradient is small and mostly
    round-off gets a step with a large relative error: observed max
    |remat - torch32| ~6e-6 and fp32 noise ~2.4e-6. Wrong AdamW details
    give 1e-4 (beta2 0.999 instead of 0.95) to 2e-3 (eps 1e-6).
  * one exception: with AdamW, the key third of each c_attn bias. Softmax
    is invariant to it, so its gradient is zero in exact arithmetic and pure
    round-off in both programs, which Adam turns into steps of up to lr;
    those C entries are held to the bound steps*lr instead. (With SGD they
    are held to the strict 1e-5.)
  * losses (the last step's training loss, and the validation loss after
    training): 1e-5; the loss is ~5 with fp32 round-off ~1e-6, and the
    report prints it with 6 decimals.
The weights are initialised larger than GPT-2's 0.02 (see gpt_init) so that
attention is far from uniform and GELU inputs are of order 1: a wrong
attention scale, the erf GELU instead of the tanh one, an off-by-one in the
batches or in the split all fail at least one check (tried by mutating the
PyTorch side).
A check fails if a value is not finite, a tensor is missing or extra, or a
shape differs. The script prints one line per check and, last,
"test_torch: N passed, N failed"; it exits 1 if any check failed.
"""
import argparse
import fnmatch
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

PARAM_TOL = {"sgd": 1e-5, "adamw": 5e-5}
LOSS_TOL = 1e-5


# ---- safetensors, by hand -------------------------------------------------

def st_write(path, tensors, metadata=None):
    """tensors: list of (name, float32 ndarray), written in that order."""
    header, off, blobs = {}, 0, []
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # pad so the data starts 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def st_read(path):
    """Returns ({name: float32 ndarray}, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode())
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            raise ValueError("%s: dtype %s, expected F32" % (name, e["dtype"]))
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[b:en], dtype="<f4").reshape(e["shape"]).copy()
    return out, meta


# ---- data: mirrors src/train/data.c ----------------------------------------

def make_text(n_bytes, seed):
    """Deterministic English-like text (bytes are the tokens)."""
    rng = np.random.RandomState(seed)
    words = ("the of and to in is was that for on with as by at from it an be this which "
             "or are remat trains networks under a memory budget recomputing activations "
             "graph stage plan arena step loss gradient layer norm attention head token").split()
    out, n = [], 0
    while n < n_bytes:
        w = words[rng.randint(len(words))]
        if rng.rand() < 0.08:
            w = w.capitalize() + rng.choice([".", ",", ";", "!\n", ".\n"])
        out.append(w)
        n += len(w) + 1
    return (" ".join(out)).encode()[:n_bytes]


def train_val_split(tokens, val_fraction):
    """rm_data_split: n_val = (size_t)((double)n * val_fraction), where the CLI
    parsed val_fraction as a float; train = the first n - n_val tokens."""
    n = len(tokens)
    n_val = int(math.floor(float(n) * float(np.float32(val_fraction))))
    n_val = min(n_val, n)
    return tokens[:n - n_val], tokens[n - n_val:]


def seq_rows(part, k, B, T):
    """Sequential sampler (rm_data_row_start): nb = (n-1) // (B*T), batch k
    starts at p = (k mod nb)*B*T, row r covers [p + r*T, p + r*T + T + 1)."""
    nb = (len(part) - 1) // (B * T)
    assert nb > 0
    p = (k % nb) * B * T
    return np.stack([part[p + r * T: p + r * T + T + 1] for r in range(B)]).astype(np.int64)


def num_batches(part, B, T):
    return (len(part) - 1) // (B * T) if len(part) >= B * T + 1 else 0


# ---- models --------------------------------------------------------------

def gpt_names(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for l in range(L):
        p = "transformer.h.%d." % l
        names += [p + s for s in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names + ["transformer.ln_f.weight", "transformer.ln_f.bias"]


def gpt_init(L, C, T, V, seed):
    """Random weights, larger than GPT-2's init (0.02) so that every part of
    the model is exercised: attention scores of order 1 (not a uniform
    softmax, where a wrong scale would not show), GELU inputs of order 1
    (where the tanh approximation differs from erf by ~1e-3), logits far
    from uniform. Layernorm gains are 1 + N(0, 0.1), biases N(0, 0.05), so
    that their gradients matter too."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std, mean=0.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * std + mean).float().numpy()

    shapes = {
        "transformer.wte.weight": ((V, C), 0.3), "transformer.wpe.weight": ((T, C), 0.3),
        "transformer.ln_f.weight": ((C,), None), "transformer.ln_f.bias": ((C,), 0.05)}
    for l in range(L):
        p = "transformer.h.%d." % l
        shapes.update({
            p + "ln_1.weight": ((C,), None), p + "ln_1.bias": ((C,), 0.05),
            p + "attn.c_attn.weight": ((3 * C, C), 0.3), p + "attn.c_attn.bias": ((3 * C,), 0.05),
            p + "attn.c_proj.weight": ((C, C), 0.1), p + "attn.c_proj.bias": ((C,), 0.05),
            p + "ln_2.weight": ((C,), None), p + "ln_2.bias": ((C,), 0.05),
            p + "mlp.c_fc.weight": ((4 * C, C), 0.3), p + "mlp.c_fc.bias": ((4 * C,), 0.05),
            p + "mlp.c_proj.weight": ((C, 4 * C), 0.05), p + "mlp.c_proj.bias": ((C,), 0.05)})
    out = []
    for name in gpt_names(L):
        shape, std = shapes[name]
        out.append((name, normal(shape, 0.1, 1.0) if std is None else normal(shape, std)))
    return out


def gpt_loss(P, idx, tgt, cfg):
    """nanoGPT's forward: pre-norm blocks, GELU (tanh), tied head, mean CE."""
    L, C, H = cfg["layers"], cfg["dim"], cfg["heads"]
    B, T = idx.shape
    hd = C // H
    eps = 1e-5
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:T]
    for l in range(L):
        p = "transformer.h.%d." % l
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = F.linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, H, hd).transpose(1, 2)
        v = v.view(B, T, H, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        h = F.gelu(F.linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
    logits = F.linear(x, P["transformer.wte.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def gpt_batch(part, k, cfg, dtype):
    rows = seq_rows(part, k, cfg["batch"], cfg["context"])
    return torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(rows[:, 1:].copy())


def mlp_names(widths):
    names = []
    for i in range(len(widths) + 1):
        names += ["layers.%d.weight" % i, "layers.%d.bias" % i]
    return names


def mlp_init(T, widths, V, seed):
    g = torch.Generator().manual_seed(seed)
    out, fan_in = [], T
    for i, w in enumerate(list(widths) + [V]):
        W = torch.randn((w, fan_in), generator=g, dtype=torch.float64) * math.sqrt(2.0 / fan_in)
        b = torch.randn((w,), generator=g, dtype=torch.float64) * 0.02
        out += [("layers.%d.weight" % i, W.float().numpy()), ("layers.%d.bias" % i, b.float().numpy())]
        fan_in = w
    return out


def mlp_loss(P, x, y, cfg):
    n = len(cfg["widths"]) + 1
    for i in range(n):
        x = F.linear(x, P["layers.%d.weight" % i], P["layers.%d.bias" % i])
        if i < n - 1:
            x = torch.relu(x)
    return F.cross_entropy(x, y)


def mlp_batch(part, k, cfg, dtype):
    """rm_data_batch_mlp: x = the row's first T ids as float32 id/(vocab-1),
    y = the token after the window."""
    T, V = cfg["context"], cfg["vocab"]
    rows = seq_rows(part, k, cfg["batch"], T)
    x = rows[:, :T].astype(np.float32) / np.float32(V - 1)  # float32 division, as in C
    return torch.from_numpy(x).to(dtype), torch.from_numpy(rows[:, T].copy())


def text_data(name, opt):
    """A text file (bytes are tokens) and its train/validation parts."""
    text = make_text(opt["text_bytes"], seed=len(name))
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    train, val = train_val_split(tokens, opt["val_fraction"])
    return text, train, val


def lm_val_batches(val, cfg):
    return min(num_batches(val, cfg["batch"], cfg["context"]), 20)


def layer_args(cfg):
    return ["--layers", str(cfg["layers"]), "--dim", str(cfg["dim"]), "--heads", str(cfg["heads"])]


# What the replay needs of each model: parameter names (in the order of the
# init), a random init, the loss of one batch, batch k of a data part, the
# number of validation batches, remat's model flags and the data file.
# tests/torch_models.py adds llama, uvit and encdec.
MODELS = {
    "gpt": dict(names=lambda cfg: gpt_names(cfg["layers"]),
                init=lambda cfg, seed: gpt_init(cfg["layers"], cfg["dim"], cfg["context"], cfg["vocab"], seed),
                loss=gpt_loss, batch=gpt_batch, val_batches=lm_val_batches, args=layer_args, data=text_data),
    "mlp": dict(names=lambda cfg: mlp_names(cfg["widths"]),
                init=lambda cfg, seed: mlp_init(cfg["context"], cfg["widths"], cfg["vocab"], seed),
                loss=mlp_loss, batch=mlp_batch, val_batches=lm_val_batches,
                args=lambda cfg: ["--widths", ",".join(str(w) for w in cfg["widths"])], data=text_data),
}


# ---- the replay ----------------------------------------------------------

def frozen_names(names, patterns):
    """remat's --freeze: comma-separated globs, each matching a name or a
    module of it (the part before one of its dots)."""
    if not patterns:
        return set()
    pats = patterns.split(",")

    def hit(n):
        parts = n.split(".")
        mods = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        return any(fnmatch.fnmatchcase(m, p) for p in pats for m in mods)
    return {n for n in names if hit(n)}


def replay(init, cfg, opt, train, val, dtype):
    """Runs the steps of `remat train` in PyTorch; returns (params, final
    training loss, validation loss, grad norms before clipping). Parameters
    opt["freeze"] names are frozen (requires_grad False, no optimizer)."""
    frozen = frozen_names([n for n, _ in init], opt.get("freeze"))
    P = {n: torch.tensor(a, dtype=dtype, requires_grad=n not in frozen) for n, a in init}
    params = [P[n] for n, _ in init if n not in frozen]
    model = MODELS[cfg["model"]]
    lossf, batchf = model["loss"], model["batch"]
    if opt["optimizer"] == "sgd":
        o = torch.optim.SGD(params, lr=opt["lr"])
    else:
        # remat decays the 2-D tensors (the tied wte included), not the 1-D ones
        decay = [p for p in params if p.dim() == 2]
        nodecay = [p for p in params if p.dim() != 2]
        o = torch.optim.AdamW([{"params": decay, "weight_decay": opt["weight_decay"]},
                               {"params": nodecay, "weight_decay": 0.0}],
                              lr=opt["lr"], betas=(0.9, 0.95), eps=opt.get("eps", 1e-8))
    loss, norms = None, []
    for k in range(opt["steps"]):
        batch = batchf(train, k, cfg, dtype)
        o.zero_grad(set_to_none=True)
        loss = lossf(P, *batch, cfg)
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)).item()
        norms.append(norm)
        if opt["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, opt["grad_clip"])
        o.step()
    # validation: mean over up to 20 sequential batches, after training
    with torch.no_grad():
        nb = model["val_batches"](val, cfg)
        vals = [lossf(P, *batchf(val, k, cfg, dtype), cfg).item() for k in range(nb)]
    val_loss = sum(vals) / len(vals) if vals else None
    return ({n: P[n].detach().double().numpy() for n, _ in init}, loss.item(), val_loss, norms)


def remat_args(cfg, opt):
    a = ["--model", cfg["model"], "--context", str(cfg["context"]), "--vocab", str(cfg["vocab"]),
         "--batch", str(cfg["batch"])]
    a += MODELS[cfg["model"]]["args"](cfg)
    a += ["--sampler", "sequential", "--optimizer", opt["optimizer"], "--lr", repr(opt["lr"]),
          "--dropout", "0", "--grad-clip", repr(opt["grad_clip"]), "--steps", str(opt["steps"]),
          "--val-fraction", repr(opt["val_fraction"]), "--threads", "2", "--lr-schedule", "constant",
          "--warmup", "0"]
    if opt["optimizer"] == "adamw":
        a += ["--weight-decay", repr(opt["weight_decay"])]
        if "eps" in opt:
            a += ["--adam-eps", repr(opt["eps"])]
    if opt.get("freeze"):
        a += ["--freeze", opt["freeze"]]
    return a


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def report(self, ok, name, detail):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)


def run_scenario(checks, remat, work, name, cfg, opt, verbose):
    model = MODELS[cfg["model"]]
    text, train, val = model["data"](name, opt)
    init = model["init"](cfg, 1234)
    expect_names = model["names"](cfg)
    assert [n for n, _ in init] == expect_names
    data_path = os.path.join(work, name + ".txt")
    init_path = os.path.join(work, name + "_init.safetensors")
    out_path = os.path.join(work, name + "_out.safetensors")
    rep_path = os.path.join(work, name + "_report.json")
    with open(data_path, "wb") as f:
        f.write(text)
    st_write(init_path, init, {"format": "pt"})
    cmd = [remat, "train", "--init", init_path, "--data", data_path, "--save", out_path,
           "--report", rep_path, "--quiet"] + remat_args(cfg, opt)
    if verbose:
        print("  $ " + " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if r.returncode != 0:
        msg = r.stdout.decode(errors="replace").strip().replace("\n", " | ")
        checks.report(False, name + " remat train", "exit %d: %s" % (r.returncode, msg))
        return
    got, meta = st_read(out_path)
    # --save writes a checkpoint file: the AdamW moments are checked by ckptfile_torch.py
    got = {n: a for n, a in got.items() if not n.startswith("optimizer.")}
    with open(rep_path) as f:
        rep = json.load(f)

    t32, loss32, val32, norms = replay(init, cfg, opt, train, val, torch.float32)
    t64, loss64, val64, _ = replay(init, cfg, opt, train, val, torch.float64)
    if verbose:
        print("  grad norms before clipping: " + ", ".join("%.4f" % n for n in norms))
    if opt["grad_clip"] > 0:
        clipped = sum(1 for n in norms if n > opt["grad_clip"])
        print("  clipping active in %d of %d steps (clip %g)" % (clipped, len(norms), opt["grad_clip"]))

    # 1. every parameter
    bad, worst, worst_name, noise, upd = [], 0.0, "", 0.0, math.inf
    missing = sorted(set(expect_names) - set(got))
    extra = sorted(set(got) - set(expect_names))
    init_d = dict(init)
    for n in expect_names:
        if n not in got:
            continue
        g, t, r64 = got[n].astype(np.float64), t32[n], t64[n]
        if g.shape != t.shape:
            bad.append("%s shape %s != %s" % (n, g.shape, t.shape))
            continue
        if not np.all(np.isfinite(g)):
            bad.append("%s not finite" % n)
            continue
        diff = np.abs(g - t)
        # the key part of c_attn.bias (all of a k_proj.bias): its gradient is
        # zero in exact arithmetic
        strict = np.ones(g.shape, dtype=bool)
        if n.endswith("attn.c_attn.bias"):
            C = g.shape[0] // 3
            strict[C:2 * C] = False
        if n.endswith("k_proj.bias"):
            strict[:] = False
        tol = np.full(g.shape, PARAM_TOL[opt["optimizer"]])
        if opt["optimizer"] == "adamw":
            tol[~strict] = opt["steps"] * opt["lr"]  # Adam turns round-off into steps <= lr
        if np.any(diff > tol):
            i = np.unravel_index(np.argmax(diff - tol), diff.shape)
            bad.append("%s[%s] remat %.7g torch %.7g" % (n, ",".join(map(str, i)), g[i], t[i]))
        if not strict.any():
            continue
        if diff[strict].max() > worst:
            worst, worst_name = float(diff[strict].max()), n
        noise = max(noise, float(np.abs(t - r64)[strict].max()))
        upd = min(upd, float(np.abs(r64 - init_d[n].astype(np.float64))[strict].max()))
        if verbose:
            print("  %-36s max|remat-torch| %.2e  max|update| %.2e" %
                  (n, diff.max(), np.abs(r64 - init_d[n]).max()))
    ok = not (bad or missing or extra)
    detail = "%d tensors, max|remat-torch32| %.2e in %s (tol %.0e); fp32 noise |torch32-torch64| %.2e; " \
             "smallest per-tensor max update %.2e" % (len(expect_names), worst, worst_name or "-", PARAM_TOL[opt["optimizer"]],
                                                     noise, upd)
    if missing:
        detail += "; missing: " + ", ".join(missing[:5])
    if extra:
        detail += "; extra: " + ", ".join(extra[:5])
    if bad:
        detail += "; over tolerance: " + "; ".join(bad[:5])
    checks.report(ok, name + " parameters", detail)

    # 2. the final training loss (the loss of the last step, before its update)
    fl = rep.get("final_loss")
    ok = isinstance(fl, (int, float)) and math.isfinite(fl) and abs(fl - loss32) <= LOSS_TOL
    checks.report(ok, name + " final loss", "remat %s torch32 %.6f torch64 %.6f (tol %.0e)" %
                  (fl, loss32, loss64, LOSS_TOL))

    # 3. the validation loss after training
    vl = rep.get("val_loss")
    ok = isinstance(vl, (int, float)) and val32 is not None and math.isfinite(vl) and abs(vl - val32) <= LOSS_TOL
    checks.report(ok, name + " val loss", "remat %s torch32 %s torch64 %s (tol %.0e)" %
                  (vl, "%.6f" % val32 if val32 is not None else None,
                   "%.6f" % val64 if val64 is not None else None, LOSS_TOL))


def main():
    gpt = {"model": "gpt", "layers": 2, "dim": 32, "heads": 4, "context": 16, "vocab": 256, "batch": 4}
    mlp = {"model": "mlp", "widths": [32, 64], "context": 8, "vocab": 256, "batch": 4}
    base = {"steps": 5, "val_fraction": 0.1, "text_bytes": 1500, "weight_decay": 0.0}
    scenarios = [
        # plain SGD: the gradients themselves. A short text, so that the 5
        # batches wrap around the training part (3 batches: 0 1 2 0 1).
        ("gpt_sgd", gpt, dict(base, optimizer="sgd", lr=0.1, grad_clip=0.0, text_bytes=300,
                              val_fraction=0.25)),
        # AdamW with decay on 2-D tensors and global-norm clipping
        ("gpt_adamw_clip", gpt, dict(base, optimizer="adamw", lr=1e-3, weight_decay=0.1, grad_clip=1.0)),
        # SGD with a clip that is always active: the update scales with the clip
        ("gpt_sgd_clip", gpt, dict(base, optimizer="sgd", lr=0.1, grad_clip=0.5)),
        ("mlp_sgd", mlp, dict(base, optimizer="sgd", lr=0.1, grad_clip=0.0, text_bytes=200,
                              val_fraction=0.3)),  # 4 batches: wraps at step 5
        ("mlp_adamw_clip", mlp, dict(base, optimizer="adamw", lr=1e-3, weight_decay=0.1, grad_clip=0.5)),
        # frozen parameters (the tied embedding, read by the embedding and the
        # head, and a block): the others' updates, and the clip's norm over them
        ("gpt_adamw_clip_freeze", gpt, dict(base, optimizer="adamw", lr=1e-3, weight_decay=0.1, grad_clip=1.0,
                                            freeze="transformer.wte,transformer.h.0")),
    ]
    return run_all(scenarios, "test_torch")


def run_all(scenarios, summary_name):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--remat", default=os.path.join(os.environ.get("BUILD", "build"), "remat"))
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--only", help="run only scenarios whose name contains this")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)

    checks = Checks()
    tmp = None
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        work = args.keep
    else:
        tmp = tempfile.TemporaryDirectory(prefix="remat_torch_")
        work = tmp.name
    try:
        for name, cfg, opt in scenarios:
            if args.only and args.only not in name:
                continue
            print("-- %s" % name, flush=True)
            try:
                run_scenario(checks, args.remat, work, name, cfg, opt, args.verbose)
            except Exception as e:  # a crash in one scenario is one failed check
                checks.report(False, name, "%s: %s" % (type(e).__name__, e))
    finally:
        if tmp:
            tmp.cleanup()
    print("%s: %d passed, %d failed" % (summary_name, checks.passed, checks.failed))
    return 0 if checks.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
