"""make test-torch2: tests/python_rematplan.py's checks with torch >= 2.4
from PyPI (a venv; the wheels are gigabytes, so not in `make test`), plus
  - transformers' GPT2LMHeadModel and LlamaForCausalLM (small configs,
    random weights, SDPA attention) at 0.5 and 0.25 of their measured
    store-all step: planned (or the least named and planned), the measured
    peak within the budget, gradients bit for bit;
  - the op-level checks of tests/python_rematplan_ops.py (functional ops,
    random and in-place ops, LayerDrop, hooks, tuple outputs, budgets,
    stable pricing) on this torch;
  - a LlamaForCausalLM folder transformers' save_pretrained writes, read by
    remat eval --init: transformers' loss to 1e-5 (RoPE's base where this
    transformers writes it), a RoPE scaling refused;
  - compile mode: torch.compile with activation_memory_budget and libremat
    as the solver: gradients equal eager's within fp tolerance, and the
    solver runs no node of the joint graph (each node's target replaced by
    one that raises while it solves).
Without torchvision in the venv the torchvision models are left out, saying
so. Prints "test_python: N passed, N failed"."""
import argparse
import contextlib
import io
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_rematplan as base  # noqa: E402
import python_rematplan_small as small  # noqa: E402
import python_rematplan_ops as ops  # noqa: E402
import python_rematplan_use as use  # noqa: E402
import python_rematplan_rebuild as rebuild  # noqa: E402
import python_rematplan_harden as harden  # noqa: E402
import python_rematplan_adv as adv  # noqa: E402
import python_rematplan_adv2 as adv2  # noqa: E402
import python_rematplan_adv3 as adv3  # noqa: E402
import rematplan_models as M  # noqa: E402
import rematplan  # noqa: E402

check = base.check


class LM(torch.nn.Module):
    """A transformers causal LM and its loss (labels = inputs): returns its output (.loss, .logits).
    use_cache=False, as transformers' own gradient checkpointing sets it: a KV cache filled again
    by a recomputation would grow (docs/PYTORCH.md, "What cannot be planned")."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, labels=ids, use_cache=False)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return LM(GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
                                         attn_implementation="sdpa")))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return LM(LlamaForCausalLM(LlamaConfig(num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=172, vocab_size=128,
                                           max_position_embeddings=64, attn_implementation="sdpa")))


def test_hf():
    idx = torch.randint(0, 128, (4, 64), generator=torch.Generator().manual_seed(3))
    for name, make in (("gpt2-hf", gpt2), ("llama-hf", llama)):
        torch.manual_seed(0)
        base.check_model(name, lambda: make().train(), (idx,))


def test_hf_folder(remat):
    """A folder transformers' own save_pretrained writes (config.json as this version writes it: 5.x puts RoPE's
    base in rope_parameters) read by remat eval --init: its mean loss is transformers' to 1e-5; a RoPE scaling
    is refused naming rope_parameters or rope_scaling."""
    import struct
    import subprocess
    import tempfile
    import torch.nn.functional as F
    from transformers import LlamaConfig, LlamaForCausalLM
    B, T, nb, V = 2, 48, 3, 128
    ids = torch.randint(0, V, (nb * B * T + 1,), generator=torch.Generator().manual_seed(5))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "ids.bin")
        with open(data, "wb") as f:  # llm.c's llama-3 token file: magic, version 7, count, uint32 ids
            f.write(struct.pack("<3i", 20240801, 7, len(ids)) + bytes(1024 - 12) + ids.to(torch.int32).numpy().tobytes())
        for scaling in (None, {"rope_type": "linear", "factor": 2.0}):
            torch.manual_seed(0)
            cfg = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=96, vocab_size=V, rope_theta=100000.0, rms_norm_eps=1e-5,
                              initializer_range=0.25)  # attention far from uniform: RoPE shows
            if scaling:
                cfg.rope_parameters = dict(scaling, rope_theta=100000.0)
            m = LlamaForCausalLM(cfg).eval()
            d = os.path.join(tmp, "linear" if scaling else "plain")
            m.save_pretrained(d)
            p = subprocess.run([remat, "eval", "--init", d, "--data", data, "--batch", str(B), "--context", str(T)],
                               capture_output=True, text=True)
            if scaling:
                check(p.returncode == 1 and ("rope_parameters" in p.stderr or "rope_scaling" in p.stderr),
                      "transformers %s folder with a linear RoPE scaling: exit %d %r"
                      % (__import__("transformers").__version__, p.returncode, p.stderr.strip()))
                continue
            line = [x for x in p.stdout.splitlines() if "mean loss" in x]
            got = float(line[0].split("mean loss ")[1].split(",")[0]) if line else None
            with torch.no_grad():
                ref = sum(float(F.cross_entropy(m(input_ids=r[:, :-1]).logits.reshape(-1, V), r[:, 1:].reshape(-1)))
                          for r in (torch.stack([ids[k * B * T + j * T: k * B * T + j * T + T + 1] for j in range(B)])
                                    for k in range(nb))) / nb
            print("remat eval --init of a transformers %s folder: mean loss %s, transformers' %.6f"
                  % (__import__("transformers").__version__, got, ref))
            check(got is not None and abs(got - ref) <= 1e-5 * abs(ref),
                  "transformers' folder: remat's mean loss %s, transformers' %.7f (%s)" % (got, ref, p.stderr.strip()))


def compile_case():
    """The compile tests' model (a copy to compile), its inputs, and the eager model's gradients."""
    cfg = M.GPTConfig(block_size=32, vocab_size=64, n_layer=2, n_head=2, n_embd=32, dropout=0.0)
    torch.manual_seed(0)
    eager = M.GPT(cfg)
    model = base.copy.deepcopy(eager)
    idx = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(6))
    _, g_ref, _ = small.step(eager, (idx, idx), 1)
    return model, idx, g_ref


def compiled_step(model, idx, budget, solve):
    """The gradients of a step of torch.compile(model) at activation_memory_budget `budget`, with
    libremat's solver calling `solve` (rematplan.compile.solve, or a wrapper of it)."""
    import torch._functorch.config as fc
    import torch._inductor.config as ic
    from rematplan import compile as rc
    was, prev = rc.solve, fc.activation_memory_budget
    rc.solve = solve
    ic.fx_graph_cache = False  # a cached graph would skip the partitioner (and the solver)
    if hasattr(fc, "enable_autograd_cache"):
        fc.enable_autograd_cache = False
    try:
        rematplan.use_as_compile_solver()
        fc.activation_memory_budget = budget
        torch._dynamo.reset()
        _, g, _ = small.step(torch.compile(model), (idx, idx), 1)
    finally:
        rc.solve, fc.activation_memory_budget = was, prev
        rematplan.use_as_compile_solver(False)
    return g


def test_compile():
    """torch.compile at activation_memory_budget 0.5 with libremat's solver: gradients as eager's,
    and no node of the joint graph run while solving."""
    from rematplan import compile as rc
    model, idx, g_ref = compile_case()
    calls, ran = [], []
    solve = rc.solve

    def guarded(memory, joint_graph, max_memory, node_info=None, candidates=None):
        targets = {}
        for n in joint_graph.nodes:
            if n.op == "call_function":
                targets[n] = n.target
                n.target = lambda *a, **k: ran.append(1)
        try:
            calls.append(len(memory))
            return solve(memory, joint_graph, max_memory, node_info, candidates)
        finally:
            for n, t in targets.items():
                n.target = t
    g = compiled_step(model, idx, 0.5, guarded)
    close = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(g, g_ref))
    check(calls and not ran, "compile mode: libremat solved %s candidates, running no node" % calls)
    check(close, "compile mode: gradients equal eager's within 1e-4 (max diff %g)"
          % max(float((a - b).abs().max()) for a, b in zip(g, g_ref)))


def test_compile_tiny():
    """torch.compile at activation_memory_budget 0.01, below the least libremat's planner plans: the
    solver saved that least plan, 0.095 of the 18 candidates' memory at a budget of 0.01
    (python_rematplan_adv3's test_compile_tiny_budget; a pure call there). Each answer within the
    budget the partitioner gives, gradients as eager's."""
    from rematplan import compile as rc
    model, idx, g_ref = compile_case()
    answers, solve = [], rc.solve

    def recorded(memory, joint_graph, max_memory, node_info=None, candidates=None):
        saved, recomputed = solve(memory, joint_graph, max_memory, node_info, candidates)
        answers.append((sum(memory[i] for i in saved), max_memory))
        return saved, recomputed
    g = compiled_step(model, idx, 0.01, recorded)
    check(answers and all(used <= most for used, most in answers),
          "compile mode at activation_memory_budget 0.01: saved memory within the partitioner's budget: %s" % answers)
    check(all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(g, g_ref)),
          "compile mode at 0.01: gradients equal eager's within 1e-4")


class CompiledInside(small.Block):
    """A block whose forward calls a torch.compile'd function (or, compiled=False, one dynamo must
    leave alone: torch.compiler.disable)."""

    def __init__(self, compiled):
        super().__init__(32, 2, 16, 0.0)
        f = lambda x: torch.nn.functional.gelu(x, approximate="tanh")  # noqa: E731
        self.f = torch.compile(f) if compiled else torch.compiler.disable(f)

    def forward(self, x):
        return super().forward(x) + self.f(x)


def test_compiled_module():
    """Issue 36: a model with torch.compile'd code (a module compiled either way, a compiled function
    in a block's forward) is refused with a ModelError naming the module and what to do (it raised
    dynamo's AssertionError, or planned a model whose applied step failed), leaving the model as it
    was; a function dynamo is told to skip (torch.compiler.disable) plans."""
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))

    def compile_fn(m):
        m.h[1] = torch.compile(m.h[1])

    def compile_method(m):
        m.h[1].compile()

    def compile_inside(m):
        m.h[2] = CompiledInside(True)
    for name, make, where in (("torch.compile(block)", compile_fn, "module 'h.1'"),
                              ("block.compile()", compile_method, "module 'h.1'"),
                              ("a compiled function in a block", compile_inside, "module 'h.2'")):
        torch.manual_seed(0)
        m = small.GPT()
        make(m)
        try:
            small.quiet(rematplan.plan, m, (x, y), 0.5)
            msg = "planned"
        except Exception as e:  # noqa: B902: which exception is what the test is about
            msg = "%s: %s" % (type(e).__name__, e)
        check(msg.startswith("ModelError") and where in msg and "torch.compile" in msg and "eager" in msg and
              "use_as_compile_solver" in msg,
              "%s: a ModelError naming %s and what to do: %s" % (name, where, msg[:300]))
        check(all("forward" not in mm.__dict__ for mm in m.modules() if type(mm).__name__ != "OptimizedModule") and
              all(p.grad is None for p in m.parameters()), "%s: the model is left as it was" % name)
    torch.manual_seed(0)
    m = small.GPT()
    m.h[2] = CompiledInside(False)
    small.check_planned(check, "a torch.compiler.disable'd function in a block", m, (x, y), 0.5)


def test_trainer():
    """transformers' Trainer given the applied model trains it as it trains the model (the same losses,
    bit for bit, 3 steps): it keeps the dataset columns the forward names (the applied forward said
    (*args, **kwargs): "the batch received was empty") and reads .config and the like from it."""
    import copy
    import tempfile
    import warnings
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64))
    ids = torch.randint(0, 128, (8, 32), generator=torch.Generator().manual_seed(5))

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": ids[i]}
    plain = copy.deepcopy(m)
    a = rematplan.apply(m, small.quiet(rematplan.plan, m, {"input_ids": ids[:4], "labels": ids[:4]}, 0.5))
    losses = []
    for model in (plain, a):
        with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = TrainingArguments(output_dir=d, per_device_train_batch_size=4, max_steps=3, report_to=[],
                                     use_cpu=True, save_strategy="no", logging_steps=1, disable_tqdm=True, seed=7)
            try:
                t = Trainer(model=model, args=args, train_dataset=Rows())
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    t.train()
                losses.append([h["loss"] for h in t.state.log_history if "loss" in h])
            except Exception as e:  # noqa: B902: what it raised is what the test reports
                losses.append("%s: %s" % (type(e).__name__, str(e)[:200]))
    same_weights = all(torch.equal(p, q) for p, q in zip(plain.parameters(), m.parameters()))
    check(isinstance(losses[1], list) and len(losses[1]) == 3 and losses[0] == losses[1] and same_weights and
          a.remat_last is not None and a.remat_last.stats["recipes"] > 0,
          "transformers' Trainer trains the applied model as the model: losses %s and %s, the same weights: %s"
          % (losses[0], losses[1], same_weights))


def test_bench_smoke():
    """bench/torch_plan.py, the script a GPU session runs (tools/pack_gpu.sh), on tiny shapes on the CPU:
    it runs to its end with every configuration (it had broken on an API since removed, Plan.n_regions,
    where nothing ran it), every plan within its budget; bench/torch_models.py --smoke, every model
    planned bit for bit within its budgets."""
    import json
    import subprocess
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.json")
        p = subprocess.run([sys.executable, os.path.join(root, "bench", "torch_plan.py"), "--devices", "cpu",
                            "--cpu-shape", "tiny", "--models", "gpt2,llama", "--rounds", "1", "--steps", "1",
                            "--amb", "0.5", "--out", out], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, KINETO_LOG_LEVEL="5"))
        rows = json.load(open(out))["rows"] if p.returncode == 0 and os.path.exists(out) else []
    configs = {(r["model"], r["config"]) for r in rows}
    want = {(m, c) for m in ("gpt2", "llama") for c in ("none", "block", "remat:0.5", "remat@block")} | \
        {("gpt2", "amb:0.5"), ("gpt2", "amb-remat:0.5")}
    planned = [r for r in rows if r["config"].startswith("remat")]
    check(p.returncode == 0 and want <= configs and planned and all(r.get("within_budget") for r in planned),
          "bench/torch_plan.py on tiny shapes: exit %d, missing %s, over budget %s: %s"
          % (p.returncode, sorted(want - configs), [r["config"] for r in planned if not r.get("within_budget")],
             (p.stderr or "").strip().splitlines()[-1:]))
    # issue 34's benchmark (docs/PYTORCH.md's tables), every model at --smoke's tiny shapes (~40 s)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "models.json")
        p = subprocess.run([sys.executable, os.path.join(root, "bench", "torch_models.py"), "--smoke", "--out", out],
                           capture_output=True, text=True, timeout=900, env=dict(os.environ, KINETO_LOG_LEVEL="5"))
        rows = json.load(open(out))["rows"] if p.returncode == 0 and os.path.exists(out) else []
    models = {r["model"] for r in rows}
    bad = [(r["model"], r["config"]) for r in rows if r["config"].startswith("remat") and
           (r.get("grads_bit_equal") is not True or r.get("within_budget") is not True)]
    check(p.returncode == 0 and len(models) == 16 and not bad,
          "bench/torch_models.py --smoke: exit %d, %d models, not bit for bit or over budget: %s %s"
          % (p.returncode, len(models), bad, (p.stderr or "").strip().splitlines()[-1:]))


def test_compiled_caller():
    """The applied model called through torch.compile: the runtime's mode runs without dynamo's guard
    (7 us an op less) only where no compiled caller's frame callback is on; with the guard left off
    there, dynamo traced the mode's frames and the gradients differed. Loss and gradients bit for bit
    the applied model's run eagerly."""
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    torch.manual_seed(0)
    m = small.GPT()
    a = rematplan.apply(m, small.quiet(rematplan.plan, m, (x, y), 0.5))

    def step(f):
        torch.manual_seed(1)
        loss = f(x, y)
        loss.backward()
        g = [p.grad.clone() for p in m.parameters()]
        for p in m.parameters():
            p.grad = None
        return loss.detach(), g, type(a.remat_last).__name__
    l0, g0, eager = step(a)
    with contextlib.redirect_stderr(io.StringIO()):
        l1, g1, compiled = step(torch.compile(a))
    check(eager == "Step" and compiled == "_WatchedStep",
          "the mode unguarded eagerly, guarded under a compiled caller (%s, %s)" % (eager, compiled))
    check(torch.equal(l0, l1) and all(torch.equal(u, v) for u, v in zip(g0, g1)),
          "torch.compile(applied model): loss and gradients bit for bit the eager applied model's")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        import torchvision  # noqa: F401
        vision = True
    except ImportError:
        vision = False
        print("torchvision is not in this venv: ResNet-50 and torchvision's BasicBlock are left out")
        small.test_untraceable = _untraceable_without_vision
    small.run(check, a.remat)
    ops.run(check)
    rebuild.run(check)
    use.run(check)
    harden.run(check)
    adv.run(check)
    adv2.run(check)
    adv3.run(check)
    base.test_budgets(a.remat)
    base.test_models(vision=vision)
    def test_hf_folder_eval():
        test_hf_folder(a.remat)

    for t in (test_hf, test_compile, test_compile_tiny, test_compiled_module, test_compiled_caller, test_trainer,
              test_bench_smoke, test_hf_folder_eval):
        t1 = time.perf_counter()
        t()
        print("%s: %.1f s" % (t.__name__, time.perf_counter() - t1))
    print("torch %s, libremat %s, %.1f s" % (torch.__version__, rematplan.libremat_version(), time.perf_counter() - t0))
    print("test_python: %d passed, %d failed" % (base.passed, base.failed))
    return 1 if base.failed else 0


def _untraceable_without_vision(check):
    torch.manual_seed(0)
    x, y = torch.randint(0, 64, (8, 32)), torch.randint(0, 64, (8, 32))
    small.check_planned(check, "untraceable (control flow, shapes, in place)", small.Branchy(), (x, y), 0.5)


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()) if os.environ.get("REMAT_QUIET_STDERR") else contextlib.nullcontext():
        sys.exit(main())
