"""hf_torch.py: remat on Hugging Face LlamaForCausalLM folders written by
PyTorch (tests/hf_llama.py: random weights, transformers' layout and
computation), run by tests/test_hf_torch.sh.

  * logits: GQA + tied head in bf16; untied multi-head in f16 over three
    shards; remat's logits (tests/hf_check.c, through remat.h) within 1e-4
    of PyTorch's, relative to the largest logit;
  * `remat eval --init DIR`: a vocabulary of 70,000 (uint32 ids, llm.c's
    llama-3 token file), its mean loss against PyTorch's over the same
    sequential batches; `remat train --init DIR --steps 0 --save F` then
    `remat eval --load F` gives the same loss;
  * LoRA (r 4 on q/k/v/o/gate/up/down) on the GQA + tied bf16 folder, the
    base kept in bf16 (--frozen-dtype auto): 5 AdamW steps of `remat
    train --init DIR --lora 4` against the same steps in PyTorch (float64,
    from remat's initial adapters, on the same sequential batches): every
    adapter weight within 5e-5; the frozen weights bit-unchanged in the
    saved file; with LoRA dropout, 2 steps then --resume equal the 5 steps
    at once (adapters, moments, the bf16 base); the PEFT folder holds the
    same adapters; `remat export
    --merge-lora` loads in PyTorch and its logits match remat's logits of
    the LoRA model within 1e-4;
  * refusals through the CLI (exit 1, a message naming the field)."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama as H  # noqa: E402

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def rel_err(got, ref):
    return float((got - ref).abs().max() / ref.abs().max())


def logits_case(hf_check, tmp, name, cfg, dtype, shards, B=2, T=24, seed=1, v5=False):
    d = os.path.join(tmp, name)
    P = H.random_params(cfg, seed, dtype, std=0.08)
    H.write_folder(d, cfg, P, dtype, shards, config=H.hf_config(cfg, v5))
    g = torch.Generator().manual_seed(seed + 100)
    idx = torch.randint(0, cfg["vocab"], (B, T), generator=g, dtype=torch.int32)
    tok, out = os.path.join(tmp, name + ".tok"), os.path.join(tmp, name + ".logits")
    idx.numpy().tofile(tok)
    rc, _, err = run([hf_check, "logits", d, tok, str(B), str(T), out])
    check(rc == 0, "%s: hf_check logits exit %d: %s" % (name, rc, err.strip()))
    if rc != 0:
        return
    with torch.no_grad():
        ref = H.logits(P, cfg, idx.long())
    got = torch.frombuffer(bytearray(open(out, "rb").read()), dtype=torch.float32).reshape(ref.shape)
    e = rel_err(got, ref)
    print("%s: logits within %.2e of PyTorch's (relative to the largest, %.3f)" % (name, e, float(ref.abs().max())))
    check(e <= 1e-4, "%s: logits differ by %.3e relative (> 1e-4)" % (name, e))


def write_llama3_tokens(path, ids):
    """llm.c's llama-3 token file: 256 int32 (magic 20240801, version 7, count), uint32 ids."""
    hdr = struct.pack("<3i", 20240801, 7, len(ids)) + b"\0" * (1024 - 12)
    with open(path, "wb") as f:
        f.write(hdr + struct.pack("<%dI" % len(ids), *ids))


def eval_loss(remat, args):
    rc, out, err = run([remat, "eval"] + args)
    for line in out.splitlines():
        if line.startswith("eval:") and "mean loss" in line:
            return float(line.split("mean loss ")[1].split(",")[0]), err
    return None, "exit %d: %s%s" % (rc, out, err)


def eval_case(remat, tmp):
    cfg = dict(layers=2, dim=32, heads=4, kv_heads=1, ffn=64, vocab=70000, eps=1e-6, theta=10000.0, tie=True)
    d = os.path.join(tmp, "big_vocab")
    P = H.random_params(cfg, 3, "F32", std=0.05)
    H.write_folder(d, cfg, P, "F32")
    B, T, nb = 2, 16, 3
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, cfg["vocab"], (nb * B * T + 1 + 5,), generator=g).tolist()
    ids[4] = 69999
    data = os.path.join(tmp, "held_out.bin")
    write_llama3_tokens(data, ids)
    loss, err = eval_loss(remat, ["--init", d, "--data", data, "--batch", str(B), "--context", str(T)])
    check(loss is not None, "eval --init big_vocab: %s" % err)
    t = torch.tensor(ids)
    with torch.no_grad():
        ref = 0.0
        for k in range(nb):
            rows = torch.stack([t[k * B * T + r * T: k * B * T + r * T + T + 1] for r in range(B)])
            lg = H.logits(P, cfg, rows[:, :-1])
            ref += float(F.cross_entropy(lg.reshape(-1, cfg["vocab"]), rows[:, 1:].reshape(-1)))
        ref /= nb
    if loss is not None:
        print("eval (vocab 70000, uint32 ids): remat %.6f, PyTorch %.6f" % (loss, ref))
        check(abs(loss - ref) <= 1e-5 * abs(ref), "eval: mean loss %.7f, PyTorch's %.7f" % (loss, ref))
    # the same model saved by remat train and evaluated from that file
    saved = os.path.join(tmp, "saved.safetensors")
    rc, out, err = run([remat, "train", "--init", d, "--data", data, "--batch", str(B), "--context", str(T),
                        "--steps", "0", "--val-fraction", "0", "--save", saved, "--quiet"])
    check(rc == 0, "train --init big_vocab --steps 0 --save: exit %d %s" % (rc, err.strip()))
    loss2, err = eval_loss(remat, ["--load", saved, "--data", data, "--batch", str(B), "--context", str(T)])
    check(loss2 is not None and loss is not None and loss2 == loss,
          "eval --load of the saved file: %s vs %s %s" % (loss2, loss, err))
    # a vocabulary the data exceeds
    rc, _, err = run([remat, "eval", "--init", d, "--data", data, "--token-bytes", "2"])
    check(rc == 1 and "4-byte" in err, "eval --token-bytes 2 on a uint32 file: exit %d %s" % (rc, err.strip()))


def write_gpt2_tokens(path, ids):
    hdr = struct.pack("<3i", 20240520, 1, len(ids)) + b"\0" * (1024 - 12)
    with open(path, "wb") as f:
        f.write(hdr + struct.pack("<%dH" % len(ids), *ids))


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_case(remat, hf_check, tmp):
    cfg = dict(layers=2, dim=48, heads=6, kv_heads=2, ffn=80, vocab=300, eps=1e-5, theta=50000.0, tie=True)
    d = os.path.join(tmp, "lora_base")
    P0 = H.random_params(cfg, 11, "BF16", std=0.08)
    H.write_folder(d, cfg, P0, "BF16")
    B, T, steps, r, alpha, lr = 2, 16, 5, 4, 8.0, 1e-3
    g = torch.Generator().manual_seed(12)
    ids = torch.randint(0, cfg["vocab"], (steps * B * T + 1,), generator=g).tolist()
    data = os.path.join(tmp, "lora.bin")
    write_gpt2_tokens(data, ids)
    def flags(lora_dropout):
        return ["--init", d, "--data", data, "--batch", str(B), "--context", str(T), "--lora", str(r),
                "--lora-alpha", repr(alpha), "--lora-dropout", lora_dropout, "--sampler", "sequential",
                "--val-fraction", "0", "--grad-clip", "0", "--lr", repr(lr), "--dropout", "0", "--threads", "2",
                "--quiet"]
    common = flags("0")
    init, out = os.path.join(tmp, "lora_init.st"), os.path.join(tmp, "lora_out.st")
    adir = os.path.join(tmp, "adapters")
    rc0, _, e0 = run([remat, "train"] + common + ["--steps", "0", "--save", init])
    rc1, _, e1 = run([remat, "train"] + common + ["--steps", str(steps), "--save", out, "--save-adapters", adir,
                                                   "--report", out + ".json"])
    check(rc0 == 0 and rc1 == 0, "lora: remat train exit %d/%d: %s %s" % (rc0, rc1, e0.strip(), e1.strip()))
    if rc0 or rc1:
        return
    rep = json.load(open(out + ".json"))
    check("kept in bf16" in rep.get("frozen", "") and not rep["frozen"].startswith("frozen: 0 "),
          "lora: the frozen base is not kept in bf16: %r" % rep.get("frozen"))
    start, got = H.read_st(init), H.read_st(out)
    dt = torch.float64
    P = {n: t.to(dt) for n, t in P0.items()}
    names = [n for n in start if ".lora_" in n and not n.startswith("optimizer.")]
    check(len(names) == 2 * 7 * cfg["layers"], "lora: %d adapter tensors (28 expected)" % len(names))
    A = {n: start[n].to(dt).clone().requires_grad_() for n in names}
    s = alpha / r

    def lin(x, w):
        y = F.linear(x, P[w])
        base = w[:-len(".weight")]
        if base.rsplit(".", 1)[-1] in LORA_TARGETS:
            y = y + s * F.linear(F.linear(x, A[base + ".lora_A.weight"]), A[base + ".lora_B.weight"])
        return y
    opt = torch.optim.AdamW(list(A.values()), lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    t = torch.tensor(ids)
    for k in range(steps):
        rows = torch.stack([t[k * B * T + i * T: k * B * T + i * T + T + 1] for i in range(B)])
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(H.logits(P, cfg, rows[:, :-1], linear=lin).reshape(-1, cfg["vocab"]),
                               rows[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
    worst = max(float((got[n].double() - A[n].detach()).abs().max()) for n in names)
    moved = max(float((got[n] - start[n]).abs().max()) for n in names)
    print("lora: 5 AdamW steps, every adapter within %.2e of PyTorch's (largest move %.2e)" % (worst, moved))
    check(worst <= 5e-5 and moved > 1e-3, "lora: adapters off by %.3e (moved %.3e)" % (worst, moved))
    resume_case(remat, tmp, flags("0.1"), data, steps)
    paged_case(remat, tmp, flags("0.1"), steps)
    # the frozen base: the same bits as the folder's bf16 weights
    base = [n for n, _ in H.shapes(cfg)]
    same = all(torch.equal(got[n], P0[n]) for n in base)
    check(same, "lora: a frozen weight changed: %s" % [n for n in base if not torch.equal(got[n], P0[n])][:3])
    # the PEFT folder
    peft = H.read_st(os.path.join(adir, "adapter_model.safetensors"))
    check(all(torch.equal(peft["base_model.model." + n], got[n]) for n in names), "lora: PEFT folder differs")
    # the merged export in PyTorch against remat's logits of the LoRA model
    merged = os.path.join(tmp, "merged.st")
    rc, _, err = run([remat, "export", "--load", out, "--merge-lora", "--out", merged])
    check(rc == 0, "lora: export --merge-lora exit %d: %s" % (rc, err.strip()))
    idx = torch.randint(0, cfg["vocab"], (B, T), generator=g, dtype=torch.int32)
    tok, lg = os.path.join(tmp, "merge.tok"), os.path.join(tmp, "merge.logits")
    idx.numpy().tofile(tok)
    rc2, _, err2 = run([hf_check, "logits-run", out, tok, str(B), str(T), lg])
    check(rc2 == 0, "lora: hf_check logits-run exit %d: %s" % (rc2, err2.strip()))
    if rc or rc2:
        return
    M = H.read_st(merged)
    check(set(M) == set(base), "lora: the merged file's tensors are not LlamaForCausalLM's: %s" % sorted(set(M) ^ set(base))[:4])
    with torch.no_grad():
        ref = H.logits(M, cfg, idx.long())
    remat_lg = torch.frombuffer(bytearray(open(lg, "rb").read()), dtype=torch.float32).reshape(ref.shape)
    e = rel_err(remat_lg, ref)
    print("lora: merged model in PyTorch within %.2e of remat's logits of the LoRA model" % e)
    check(e <= 1e-4, "lora: merged logits differ by %.3e relative" % e)


def resume_case(remat, tmp, common, data, steps):
    """--init DIR with LoRA dropout, 2 steps saved, then --resume to `steps`:
    the same file, adapters, moments and the bf16 base, as `steps` at once;
    the resumed run keeps the base in bf16 (the file's dtype)."""
    whole, part, res = (os.path.join(tmp, n + ".st") for n in ("whole", "part", "resumed"))
    rc0, _, e0 = run([remat, "train"] + common + ["--steps", str(steps), "--save", whole])
    rc1, _, e1 = run([remat, "train"] + common + ["--steps", "2", "--save", part])
    rc2, _, e2 = run([remat, "train", "--resume", part, "--data", data, "--steps", str(steps),
                      "--threads", "2", "--quiet", "--save", res, "--report", res + ".json"])
    check(rc0 == 0 and rc1 == 0 and rc2 == 0, "resume: exit %d/%d/%d: %s %s %s" % (rc0, rc1, rc2, e0, e1, e2))
    if rc0 or rc1 or rc2:
        return
    a, b = H.read_st(whole), H.read_st(res)
    differ = [n for n in a if n not in b or not torch.equal(a[n], b[n])]
    check(set(a) == set(b) and not differ and any(n.startswith("optimizer.") for n in a),
          "resume: 2 + %d steps differ from %d at once: %s" % (steps - 2, steps, differ[:3]))
    frozen = json.load(open(res + ".json")).get("frozen", "")
    check("kept in bf16" in frozen and not frozen.startswith("frozen: 0 "), "resume: base not kept in bf16: %r" % frozen)
    print("lora: --resume with dropout 0.1: 2 + %d steps equal %d at once (%d tensors, moments included)" % (
        steps - 2, steps, len(a)))


def paged_case(remat, tmp, common, steps):
    """--init DIR with a bf16 base and --scratch --page all (issue 20): the
    activations, moments and float parameters in the scratch file, the bf16
    base kept in memory (never paged); the same file as without paging, and
    2 paged steps resumed paged equal `steps` at once."""
    scratch = tempfile.mkdtemp(prefix="hf_scratch.", dir=os.path.dirname(os.path.abspath(remat)))  # /tmp: tmpfs?
    fused = common + ["--fuse-optimizer"]  # common has --grad-clip 0
    page = ["--scratch", scratch, "--page", "all", "--scratch-bandwidth", "1GB/s"]
    plain, paged, part, res = (os.path.join(tmp, n + ".st") for n in ("fplain", "fpaged", "fpart", "fres"))
    try:
        rcs = [run([remat, "train"] + fused + ["--steps", str(steps), "--save", plain]),
               run([remat, "train"] + fused + page + ["--steps", str(steps), "--save", paged]),
               run([remat, "train"] + fused + page + ["--steps", "2", "--save", part]),
               run([remat, "train", "--resume", part, "--steps", str(steps), "--fuse-optimizer", "--grad-clip", "0",
                    "--quiet", "--save", res] + page)]
        left = os.listdir(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    check(all(r[0] == 0 for r in rcs), "paged: exits %s: %s" % ([r[0] for r in rcs], [r[2].strip() for r in rcs]))
    check(not left, "paged: files left in the scratch folder: %s" % left)
    if any(r[0] for r in rcs):
        return
    a = H.read_st(plain)
    for f in (paged, res):
        b = H.read_st(f)
        differ = [n for n in a if n not in b or not torch.equal(a[n], b[n])]
        check(set(a) == set(b) and not differ, "paged: %s differs from the unpaged run: %s" % (f, differ[:3]))
    print("lora: bf16 base, --page all: the same %d tensors as without paging, resumed paged too" % len(a))


def refusal_cases(remat, tmp):
    """Configs and folders remat must refuse, naming what is wrong."""
    cfg = dict(layers=1, dim=16, heads=2, kv_heads=1, ffn=32, vocab=50, tie=False)
    P = H.random_params(cfg, 5, "BF16")
    data = os.path.join(tmp, "small.bin")
    write_llama3_tokens(data, list(range(50)) * 4)
    cases = [
        ("rope_scaling", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
        ("rope_parameters", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
         "rope_parameters"),
        ("hidden_act_null", {"hidden_act": None}, "hidden_act"),
        ("attention_bias", {"attention_bias": True}, "attention_bias"),
        ("mlp_bias", {"mlp_bias": True}, "mlp_bias"),
        ("model_type", {"model_type": "mistral"}, "model_type"),
        ("hidden_act", {"hidden_act": "gelu"}, "hidden_act"),
        ("attention_dropout", {"attention_dropout": 0.1}, "attention_dropout"),
        ("head_dim", {"head_dim": 4}, "head_dim"),
        ("kv_heads", {"num_key_value_heads": 3}, "num_key_value_heads"),
        ("layers_string", {"num_hidden_layers": "1"}, "num_hidden_layers"),
        ("architectures", {"architectures": ["LlamaForSequenceClassification"]}, "architectures"),
        ("quantized", {"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
        ("no_hidden", {"hidden_size": None}, "hidden_size"),
    ]
    for name, change, word in cases:
        d = os.path.join(tmp, "bad_" + name)
        c = H.hf_config(cfg)
        c.update(change)
        H.write_folder(d, cfg, P, "BF16", config=c)
        rc, _, err = run([remat, "eval", "--init", d, "--data", data, "--batch", "1", "--context", "8"])
        check(rc == 1 and word in err, "config %s: exit %d, message %r" % (name, rc, err.strip()))
    # tensors: a bias, a missing one, a wrong shape, an integer dtype
    base = os.path.join(tmp, "bad_tensors")
    H.write_folder(base, cfg, P, "BF16")
    names = [n for n, _ in H.shapes(cfg)]
    variants = {
        "bias": ({**P, "model.layers.0.self_attn.q_proj.bias": torch.zeros(16)}, "no biases"),
        "missing": ({n: P[n] for n in names if n != "model.norm.weight"}, "model.norm.weight"),
        "shape": ({**P, "model.layers.0.mlp.up_proj.weight": torch.zeros(31, 16)}, "mlp.up_proj"),
    }
    for name, (tensors, word) in variants.items():
        with open(os.path.join(base, "model.safetensors"), "wb") as f:
            f.write(H.st_bytes(tensors, "BF16"))
        rc, _, err = run([remat, "eval", "--init", base, "--data", data, "--batch", "1", "--context", "8"])
        check(rc == 1 and word in err, "tensors %s: exit %d, message %r" % (name, rc, err.strip()))
    # a truncated weight file
    blob = H.st_bytes(P, "BF16")
    with open(os.path.join(base, "model.safetensors"), "wb") as f:
        f.write(blob[:-100])
    rc, _, err = run([remat, "eval", "--init", base, "--data", data, "--batch", "1", "--context", "8"])
    check(rc == 1 and "model.safetensors" in err, "truncated weights: exit %d, message %r" % (rc, err.strip()))
    # an index naming a file outside the folder
    os.remove(os.path.join(base, "model.safetensors"))
    with open(os.path.join(base, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {n: "../escape.safetensors" for n in names}}, f)
    rc, _, err = run([remat, "eval", "--init", base, "--data", data, "--batch", "1", "--context", "8"])
    check(rc == 1 and "weight_map" in err, "index ../: exit %d, message %r" % (rc, err.strip()))
    # a model flag that contradicts config.json is a usage error
    good = os.path.join(tmp, "good")
    H.write_folder(good, cfg, P, "BF16")
    rc, _, err = run([remat, "train", "--init", good, "--layers", "3", "--data", data, "--steps", "1"])
    check(rc == 2 and "num_hidden_layers" in err, "--layers against config.json: exit %d %r" % (rc, err.strip()))
    # no output may replace the folder's files; eval refuses the flags of training
    before = open(os.path.join(good, "model.safetensors"), "rb").read()
    for cmd, out in (("train", ["--save", os.path.join(good, "model.safetensors")]),
                     ("train", ["--report", os.path.join(good, "..", "good", "config.json")]),
                     ("eval", ["--report", os.path.join(good, "model-00001-of-00002.safetensors")])):
        rc, _, err = run([remat, cmd, "--init", good, "--data", data, "--batch", "1", "--context", "8", "--steps", "1"]
                         [:-2 if cmd == "eval" else None] + out)
        check(rc == 2 and "model folder" in err, "%s %s: exit %d %r" % (cmd, out, rc, err.strip()))
    check(open(os.path.join(good, "model.safetensors"), "rb").read() == before, "the folder's weights unchanged")
    # remat bench plans its budgets for config.json's model, its bf16 base kept as the children keep it
    csv = os.path.join(tmp, "bench.csv")
    rc, out, err = run([remat, "bench", "--init", good, "--data", data, "--batch", "1", "--context", "8", "--lora", "2",
                        "--steps", "1", "--rounds", "1", "--strategies", "none", "--budgets", "2", "--csv", csv])
    rows = open(csv).read() if os.path.exists(csv) else ""
    check(rc == 0 and "skipped" not in out + err and rows.count("llama L1 C16 H2 K1 T8 V50 B1,") == 3,
          "bench --init DIR: exit %d, rows %r %s" % (rc, rows, (out + err).strip()[-300:]))
    rc, _, err = run([remat, "eval", "--init", good, "--data", data, "--lr", "0.1"])
    check(rc == 2 and "not remat eval" in err, "eval --lr: exit %d %r" % (rc, err.strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", required=True)
    args = ap.parse_args()
    remat = args.remat
    hf_check = os.path.join(os.path.dirname(remat), "tests", "hf_check")
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="hf_torch.")
    try:
        gqa = dict(layers=2, dim=48, heads=6, kv_heads=2, ffn=80, vocab=300, eps=1e-5, theta=50000.0, tie=True)
        logits_case(hf_check, tmp, "gqa_tied_bf16", gqa, "BF16", 1)
        mha = dict(layers=2, dim=32, heads=4, kv_heads=4, ffn=64, vocab=260, eps=1e-6, theta=10000.0, tie=False)
        logits_case(hf_check, tmp, "mha_untied_f16_3shards", mha, "F16", 3, B=3, T=70)
        # config.json as transformers 5 writes it: RoPE's base only in rope_parameters
        logits_case(hf_check, tmp, "gqa_transformers5_config", dict(gqa, theta=100000.0), "BF16", 1, T=70, v5=True)
        eval_case(remat, tmp)
        lora_case(remat, hf_check, tmp)
        refusal_cases(remat, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_hf_torch: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
