"""The models of bench/torch_models.py (issue 34): each built from a config
with random weights (nothing is fetched), a fixed seed, dropout on where the
model has it, in train mode, as a module whose forward returns the loss,
with its inputs and how per-layer checkpointing is switched on for it.

Shapes are CPU-sized (a store-all step of roughly 0.1-1 s on 2 threads);
--smoke takes tiny ones. Every transformers model runs with use_cache=False
(as its own gradient checkpointing sets) and SDPA attention where the model
has it (eager otherwise: the Spec says which).
"""
import contextlib
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 8192


class Spec:
    """A benchmark model: module (forward -> loss), inputs (a tuple of tensors), shape (words), and
    per_layer: a context factory switching per-layer checkpointing on (None, and per_layer_why,
    where the model has none)."""

    def __init__(self, name, model, inputs, shape, per_layer=None, per_layer_how="", per_layer_why=""):
        self.name, self.model, self.inputs, self.shape = name, model, inputs, shape
        self.per_layer, self.per_layer_how, self.per_layer_why = per_layer, per_layer_how, per_layer_why


def quiet():
    """transformers' and PEFT's advice on stderr is noise in a benchmark's output."""
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        import transformers
        transformers.logging.set_verbosity_error()
    except ImportError:
        pass


# ---- per-layer checkpointing, as users switch it on ---------------------------------------

@contextlib.contextmanager
def hf_checkpointing(hf):
    """transformers' own: gradient_checkpointing_enable, non-reentrant. It also leaves a hook making
    the input embeddings' output require grad, which its disable() keeps (unless PEFT loaded the
    model): removed here so it does not run into the other configurations."""
    had_hooks = bool(getattr(hf, "_require_grads_hooks", None))
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        yield
    finally:
        hf.gradient_checkpointing_disable()
        if not had_hooks and hasattr(hf, "disable_input_require_grads"):
            hf.disable_input_require_grads()


@contextlib.contextmanager
def blockwise(blocks):
    """checkpoint(block, x, use_reentrant=False) per block: each block's forward replaced on the
    instance for the context (what a user writes in the model's loop)."""
    from torch.utils.checkpoint import checkpoint
    saved = [b.__dict__.get("forward") for b in blocks]
    for b in blocks:
        b.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=False))(b.forward)
    try:
        yield
    finally:
        for b, f in zip(blocks, saved):
            if f is None:
                del b.forward
            else:
                b.forward = f


@contextlib.contextmanager
def flag(model):
    """A model whose own loop checkpoints when model.checkpointed is set (the MLP)."""
    model.checkpointed = True
    try:
        yield
    finally:
        model.checkpointed = False


# ---- wrappers: forward -> loss -------------------------------------------------------------

class HFStep(nn.Module):
    """A transformers model called with named inputs (positional here, as plan() passes them) and
    fixed keyword arguments (use_cache=False, return_loss=True); its output carries .loss."""

    def __init__(self, hf, names, **fixed):
        super().__init__()
        self.m, self.names, self.fixed = hf, names, fixed

    def forward(self, *tensors):
        return self.m(**dict(zip(self.names, tensors)), **self.fixed)


class WithLoss(nn.Module):
    """A classifier and its cross-entropy."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


class MLP(nn.Module):
    """Issue 34's MLP: 8 x (nn.Linear then F.gelu, a function: no module for the pair), a loss.
    checkpointed: each Linear+gelu pair under checkpoint, as a user writes it."""

    def __init__(self, width, depth=8, classes=None):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.checkpointed = False

    def forward(self, x, y):
        from torch.utils.checkpoint import checkpoint
        for lin in self.layers:
            if self.checkpointed:
                x = checkpoint(lambda h, lin=lin: F.gelu(lin(h)), x, use_reentrant=False)
            else:
                x = F.gelu(lin(x))
        return F.cross_entropy(x, y)


# ---- the models ----------------------------------------------------------------------------

def gen():
    return torch.Generator().manual_seed(1)


def tokens(b, t, vocab=VOCAB, low=0):
    return torch.randint(low, vocab, (b, t), generator=gen())


def hf_model(cls, cfg):
    """A transformers model from its config, SDPA attention where it has it, else eager."""
    for impl in ("sdpa", "eager"):
        try:
            cfg._attn_implementation = impl
            m = cls(cfg)
            return m, impl
        except (ValueError, ImportError):
            continue
    raise RuntimeError("%s: neither sdpa nor eager attention" % cls.__name__)


def hf_spec(name, cls, cfg, names, inputs, shape, **fixed):
    hf, impl = hf_model(cls, cfg)
    return Spec(name, HFStep(hf, names, **fixed), inputs, "%s, %s attention" % (shape, impl),
                lambda: hf_checkpointing(hf), "transformers' gradient_checkpointing_enable (use_reentrant=False)")


def lm_shape(smoke, layers=4, width=256):
    """(layers, width, heads, kv heads, ffn, batch, context)."""
    if smoke:
        return 2, 64, 4, 2, 128, 2, 32
    return layers, width, 8, 2, int(width * 2.6875), 4, 256


def causal(name, cls, cfg_cls, smoke, **extra):
    L, C, H, KV, FF, B, T = lm_shape(smoke)
    cfg = cfg_cls(vocab_size=VOCAB, hidden_size=C, intermediate_size=FF, num_hidden_layers=L,
                  num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=T,
                  attention_dropout=0.1, use_cache=False, **extra)
    ids = tokens(B, T)
    return hf_spec(name, cls, cfg, ("input_ids", "labels"), (ids, ids),
                   "%d x %d, %d heads, %d kv, ffn %d, batch %d x %d" % (L, C, H, KV, FF, B, T), use_cache=False)


def mistral(smoke):
    from transformers import MistralConfig, MistralForCausalLM
    return causal("mistral", MistralForCausalLM, MistralConfig, smoke, sliding_window=None)


def qwen2(smoke):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    return causal("qwen2", Qwen2ForCausalLM, Qwen2Config, smoke)


def llama(smoke):
    """The issue's small Llama: 6 layers x 128, GQA."""
    from transformers import LlamaConfig, LlamaForCausalLM
    L, C, H, KV, FF, B, T = (2, 64, 4, 2, 172, 2, 32) if smoke else (6, 128, 4, 2, 344, 8, 256)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=C, intermediate_size=FF, num_hidden_layers=L,
                      num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=T,
                      attention_dropout=0.1, use_cache=False)
    ids = tokens(B, T)
    return hf_spec("llama", LlamaForCausalLM, cfg, ("input_ids", "labels"), (ids, ids),
                   "%d x %d, %d heads, %d kv, ffn %d, batch %d x %d" % (L, C, H, KV, FF, B, T), use_cache=False)


def gpt2(smoke):
    """The issue's small GPT2: 6 layers x 128."""
    from transformers import GPT2Config, GPT2LMHeadModel
    L, C, H, B, T = (2, 64, 2, 2, 32) if smoke else (6, 128, 4, 8, 256)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=C, n_layer=L, n_head=H, use_cache=False)
    ids = tokens(B, T)
    return hf_spec("gpt2", GPT2LMHeadModel, cfg, ("input_ids", "labels"), (ids, ids),
                   "%d x %d, %d heads, batch %d x %d" % (L, C, H, B, T), use_cache=False)


def gpt_neox(smoke):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    L, C, H, _, FF, B, T = lm_shape(smoke)
    cfg = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=C, num_hidden_layers=L, num_attention_heads=H,
                        intermediate_size=4 * C, max_position_embeddings=T, rotary_pct=0.25,
                        hidden_dropout=0.1, attention_dropout=0.1, use_cache=False)
    ids = tokens(B, T)
    return hf_spec("gpt-neox", GPTNeoXForCausalLM, cfg, ("input_ids", "labels"), (ids, ids),
                   "%d x %d, %d heads, ffn %d, batch %d x %d" % (L, C, H, 4 * C, B, T), use_cache=False)


def bert(smoke):
    """Masked LM: 15% of the positions labelled, the rest -100."""
    from transformers import BertConfig, BertForMaskedLM
    L, C, H, B, T = (2, 64, 2, 2, 32) if smoke else (4, 256, 4, 8, 256)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=C, num_hidden_layers=L, num_attention_heads=H,
                     intermediate_size=4 * C, max_position_embeddings=T)
    ids = tokens(B, T)
    labels = torch.where(torch.rand(B, T, generator=gen()) < 0.15, ids, torch.full_like(ids, -100))
    return hf_spec("bert", BertForMaskedLM, cfg, ("input_ids", "labels"), (ids, labels),
                   "%d x %d, %d heads, batch %d x %d, dropout 0.1" % (L, C, H, B, T))


def seq2seq_shape(smoke):
    """(layers each side, width, heads, batch, source, target)."""
    return (2, 64, 2, 2, 32, 16) if smoke else (4, 256, 4, 8, 256, 64)


def t5(smoke):
    from transformers import T5Config, T5ForConditionalGeneration
    L, C, H, B, S, T = seq2seq_shape(smoke)
    cfg = T5Config(vocab_size=VOCAB, d_model=C, d_kv=C // H, d_ff=4 * C, num_layers=L, num_decoder_layers=L,
                   num_heads=H, dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0, use_cache=False)
    return hf_spec("t5", T5ForConditionalGeneration, cfg, ("input_ids", "labels"),
                   (tokens(B, S, low=1), tokens(B, T, low=1)),
                   "%d+%d x %d, %d heads, batch %d, source %d, target %d" % (L, L, C, H, B, S, T), use_cache=False)


def bart(smoke):
    from transformers import BartConfig, BartForConditionalGeneration
    L, C, H, B, S, T = seq2seq_shape(smoke)
    cfg = BartConfig(vocab_size=VOCAB, d_model=C, encoder_layers=L, decoder_layers=L, encoder_attention_heads=H,
                     decoder_attention_heads=H, encoder_ffn_dim=4 * C, decoder_ffn_dim=4 * C,
                     max_position_embeddings=S, dropout=0.1, attention_dropout=0.1, activation_dropout=0.1,
                     use_cache=False)
    return hf_spec("bart", BartForConditionalGeneration, cfg, ("input_ids", "labels"),
                   (tokens(B, S, low=3), tokens(B, T, low=3)),
                   "%d+%d x %d, %d heads, batch %d, source %d, target %d" % (L, L, C, H, B, S, T), use_cache=False)


def whisper(smoke):
    """Speech seq2seq on log-mel input features (80 bins, 2 frames per encoder position)."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    L, C, H, B, S, T = (2, 64, 2, 2, 32, 16) if smoke else (4, 256, 4, 4, 300, 64)
    cfg = WhisperConfig(vocab_size=VOCAB, num_mel_bins=80, d_model=C, encoder_layers=L, decoder_layers=L,
                        encoder_attention_heads=H, decoder_attention_heads=H, encoder_ffn_dim=4 * C,
                        decoder_ffn_dim=4 * C, max_source_positions=S, max_target_positions=max(T, 64),
                        dropout=0.1, attention_dropout=0.1, activation_dropout=0.1, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, use_cache=False,
                        suppress_tokens=None, begin_suppress_tokens=None)
    feats = torch.randn(B, 80, 2 * S, generator=gen())
    return hf_spec("whisper", WhisperForConditionalGeneration, cfg, ("input_features", "labels"),
                   (feats, tokens(B, T, low=3)),
                   "%d+%d x %d, %d heads, batch %d, %d frames, target %d" % (L, L, C, H, B, 2 * S, T),
                   use_cache=False)


def vit(smoke):
    from transformers import ViTConfig, ViTForImageClassification
    L, C, H, B, side, patch = (2, 64, 2, 2, 32, 8) if smoke else (4, 256, 4, 16, 96, 8)
    cfg = ViTConfig(image_size=side, patch_size=patch, hidden_size=C, num_hidden_layers=L, num_attention_heads=H,
                    intermediate_size=4 * C, num_labels=10, hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1)
    g = gen()
    img, y = torch.randn(B, 3, side, side, generator=g), torch.randint(0, 10, (B,), generator=g)
    return hf_spec("vit", ViTForImageClassification, cfg, ("pixel_values", "labels"), (img, y),
                   "%d x %d, %d heads, batch %d x %d px, patch %d" % (L, C, H, B, side, patch))


def clip(smoke):
    """Contrastive: a batch of (caption, image) pairs, return_loss=True."""
    from transformers import CLIPConfig, CLIPModel
    L, C, H, B, T, side = (2, 64, 2, 2, 16, 32) if smoke else (4, 256, 4, 32, 64, 96)
    common = dict(hidden_size=C, num_hidden_layers=L, num_attention_heads=H, intermediate_size=4 * C,
                  attention_dropout=0.1)
    cfg = CLIPConfig(text_config=dict(vocab_size=VOCAB, max_position_embeddings=T, **common),
                     vision_config=dict(image_size=side, patch_size=16 if not smoke else 8, **common),
                     projection_dim=C // 2)
    img = torch.randn(B, 3, side, side, generator=gen())
    return hf_spec("clip", CLIPModel, cfg, ("input_ids", "pixel_values"), (tokens(B, T), img),
                   "text and vision %d x %d, %d heads, batch %d, %d tokens, %d px" % (L, C, H, B, T, side),
                   return_loss=True)


def mistral_lora(smoke):
    """Mistral under PEFT's LoRA (r 8 on q, k, v, o; dropout 0.1): only the adapters train."""
    from peft import LoraConfig, get_peft_model
    from transformers import MistralConfig, MistralForCausalLM
    L, C, H, KV, FF, B, T = lm_shape(smoke, layers=4, width=384)
    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=C, intermediate_size=FF, num_hidden_layers=L,
                        num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=T,
                        attention_dropout=0.1, sliding_window=None, use_cache=False)
    base, impl = hf_model(MistralForCausalLM, cfg)
    lora = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.1,
                                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    ids = tokens(B, T)
    return Spec("mistral-lora", HFStep(lora, ("input_ids", "labels"), use_cache=False), (ids, ids),
                "%d x %d, %d heads, %d kv, ffn %d, batch %d x %d, LoRA r 8 on q,k,v,o, %s attention"
                % (L, C, H, KV, FF, B, T, impl),
                lambda: hf_checkpointing(base), "transformers' gradient_checkpointing_enable on the base model")


def image(smoke, side, b):
    g = gen()
    side, b = (32, 2) if smoke else (side, b)
    return (torch.randn(b, 3, side, side, generator=g), torch.randint(0, 10, (b,), generator=g)), side, b


def convnext(smoke):
    """torchvision's convnext_tiny (stochastic depth 0.1) at a small image; checkpoint per CNBlock."""
    import torchvision
    from torchvision.models.convnext import CNBlock
    net = torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.1)
    inputs, side, b = image(smoke, 64, 8)
    blocks = [m for m in net.modules() if isinstance(m, CNBlock)]
    return Spec("convnext", WithLoss(net), inputs, "convnext_tiny, batch %d x %d px" % (b, side),
                lambda: blockwise(blocks), "checkpoint per CNBlock (%d)" % len(blocks))


def mobilenet(smoke):
    """torchvision's mobilenet_v3_large (classifier dropout 0.2); checkpoint per feature block."""
    import torchvision
    net = torchvision.models.mobilenet_v3_large(num_classes=10)
    inputs, side, b = image(smoke, 128, 8)
    blocks = list(net.features)
    return Spec("mobilenetv3", WithLoss(net), inputs, "mobilenet_v3_large, batch %d x %d px" % (b, side),
                lambda: blockwise(blocks), "checkpoint per features[i] (%d)" % len(blocks))


def nanogpt(smoke):
    """The nanoGPT-style GPT of tests/rematplan_models.py, dropout 0.1; checkpoint per Block."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import rematplan_models as M
    L, C, H, B, T = (2, 64, 2, 2, 32) if smoke else (4, 256, 4, 4, 256)
    m = M.GPT(M.GPTConfig(block_size=T, vocab_size=VOCAB, n_layer=L, n_head=H, n_embd=C, dropout=0.1))
    ids = tokens(B, T)
    blocks = list(m.transformer.h)
    return Spec("nanogpt", m, (ids, ids), "%d x %d, %d heads, batch %d x %d, SDPA" % (L, C, H, B, T),
                lambda: blockwise(blocks), "checkpoint per Block")


def mlp(smoke):
    W, B = (64, 16) if smoke else (1024, 512)
    m = MLP(W)
    g = gen()
    x, y = torch.randn(B, W, generator=g), torch.randint(0, W, (B,), generator=g)
    return Spec("mlp", m, (x, y), "8 x (Linear %d then F.gelu), batch %d" % (W, B),
                lambda: flag(m), "checkpoint per Linear+gelu pair")


BUILDERS = {"bert": bert, "t5": t5, "vit": vit, "mistral": mistral, "qwen2": qwen2, "gpt-neox": gpt_neox,
            "whisper": whisper, "bart": bart, "clip": clip, "mistral-lora": mistral_lora, "convnext": convnext,
            "mobilenetv3": mobilenet, "nanogpt": nanogpt, "mlp": mlp, "gpt2": gpt2, "llama": llama}
NAMES = list(BUILDERS)


def build(torch_, name, smoke):
    """The model's Spec, its weights from a fixed seed, in train mode."""
    torch.manual_seed(0)
    spec = BUILDERS[name](smoke)
    spec.model.train()
    return spec
