"""A Hugging Face causal LM for pstrain: a hub folder's config.json in, a TorchScript file out.

    /usr/bin/python3 tools/hf_model.py HUB_DIR model.pt --block-size 512 --lora 8
    mpirun -np 3 build/pstrain --model model.pt --init-from HUB_DIR --dataset data.npz ...

Families, by config.json's model_type: llama (Llama 2 and 3.x, rope_scaling "llama3",
SmolLM, TinyLlama), mistral, qwen2 (its q/k/v biases) and gpt2 (its Conv1D weights stored
[in, out]). The module's state_dict() names and shapes are those of transformers'
*ForCausalLM for the family (GPT-2's under "transformer."), its ties those of
tie_word_embeddings, and forward(ids, targets) -> (logits, loss) computes as transformers
does: RoPE by rotate_half with rope_theta (and llama3's scaling), RMSNorm in float32, grouped
query attention, the SiLU-gated MLP, GPT-2's gelu_new; targets are the next tokens, -100
ignored. Dropout is off, as mlx-lm fine-tunes.

The file holds the architecture, not the weights: each base tensor is a placeholder (one
element, viewed at its shape), which pstrain fills from --init-from HUB_DIR (and refuses to
train without). With --lora R, LoRA adapters are added as PEFT adds them: lora_A [R, in]
kaiming-uniform, lora_B [out, R] zero, scaled by alpha / R, named <module>.lora_A.weight and
<module>.lora_B.weight, the base frozen under the hub's names; PEFT's default targets are
q_proj,v_proj (llama, mistral, qwen2) and c_attn (gpt2). What pstrain needs beyond
TorchScript (the family, the prefix transformers adds to a bare checkpoint's names, the
adapters, the non-persistent buffers) goes in the file's extra/pstrain.json.

An unknown model_type, or a config key this cannot honour (another rope_scaling type, a
sliding window shorter than --block-size, quantized weights ...), is exit 2 naming it, with
nothing written.
"""
import argparse
import json
import math
import os
import sys
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_file import save  # noqa: E402

FAMILIES = ("llama", "mistral", "qwen2", "gpt2")
DEFAULT_TARGETS = {"llama": "q_proj,v_proj", "mistral": "q_proj,v_proj", "qwen2": "q_proj,v_proj", "gpt2": "c_attn"}
# transformers' base_model_prefix: a checkpoint of the bare model names its tensors without it.
BASE_PREFIX = {"llama": "model", "mistral": "model", "qwen2": "model", "gpt2": "transformer"}
# Names of a hub checkpoint that transformers leaves unread (_keys_to_ignore_on_load_unexpected):
# GPT-2's old files keep its attention masks, buffers no module has now. '#' is a layer number.
IGNORED = {"gpt2": ["h.#.attn.bias", "h.#.attn.masked_bias", "transformer.h.#.attn.bias",
                    "transformer.h.#.attn.masked_bias"]}


class Refused(Exception):
    """A config this cannot honour: exit 2, nothing written."""


def placeholder(*shape):
    """A weight the file holds no values for: one element viewed at `shape` (pstrain fills it
    from --init-from)."""
    return nn.Parameter(torch.zeros(1).expand(*shape))


class Linear(nn.Module):
    """nn.Linear's names and numerics (weight [out, in]), its weight a placeholder."""

    def __init__(self, features_in: int, features_out: int, bias: bool):
        super().__init__()
        self.features_in, self.features_out = features_in, features_out
        self.weight = placeholder(features_out, features_in)
        self.bias = placeholder(features_out) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class Conv1D(nn.Module):
    """GPT-2's Conv1D: weight stored [in, out], y = x W + b."""

    def __init__(self, features_in: int, features_out: int):
        super().__init__()
        self.features_in, self.features_out = features_in, features_out
        self.weight = placeholder(features_in, features_out)
        self.bias = placeholder(features_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight) + self.bias


def add_adapters(layer: nn.Module, rank: int, alpha: float):
    """PEFT's adapters in `layer`: lora_A [r, in] kaiming-uniform (a = sqrt(5)), lora_B
    [out, r] zero, scaled by alpha / r."""
    layer.lora_A = nn.Linear(layer.features_in, rank, bias=False)
    layer.lora_B = nn.Linear(rank, layer.features_out, bias=False)
    nn.init.kaiming_uniform_(layer.lora_A.weight, a=math.sqrt(5))
    nn.init.zeros_(layer.lora_B.weight)
    layer.scaling = alpha / rank


class LoRALinear(Linear):
    """A Linear with LoRA beside it: its weight and bias keep their names."""

    def __init__(self, base: Linear, rank: int, alpha: float):
        super().__init__(base.features_in, base.features_out, base.bias is not None)
        self.weight, self.bias = base.weight, base.bias
        add_adapters(self, rank, alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + self.lora_B(self.lora_A(x)) * self.scaling


class LoRAConv1D(Conv1D):
    """GPT-2's Conv1D with LoRA beside it (PEFT's fan_in_fan_out: the adapters are Linear's)."""

    def __init__(self, base: Conv1D, rank: int, alpha: float):
        super().__init__(base.features_in, base.features_out)
        self.weight, self.bias = base.weight, base.bias
        add_adapters(self, rank, alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight) + self.bias + self.lora_B(self.lora_A(x)) * self.scaling


def add_lora(model: nn.Module, rank: int, alpha: float, targets: List[str]) -> List[str]:
    """PEFT's injection: each Linear or Conv1D whose name is a target, or ends with "." and
    one, gets adapters; returns their names."""
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not any(full == t or full.endswith("." + t) for t in targets):
                continue
            if isinstance(child, Linear):
                setattr(module, child_name, LoRALinear(child, rank, alpha))
            elif isinstance(child, Conv1D):
                setattr(module, child_name, LoRAConv1D(child, rank, alpha))
            else:
                continue
            replaced.append(full)
    return replaced


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """transformers' rotary embedding: inv_freq from rope_theta (llama3's scaling applied),
    cos and sin of positions x inv_freq, each half twice."""

    def __init__(self, config: dict, head_dim: int):
        super().__init__()
        theta = float(config.get("rope_theta", 10000.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        scaling = config.get("rope_scaling")
        if scaling is not None and (scaling.get("rope_type", scaling.get("type")) == "llama3"):
            inv_freq = llama3_inv_freq(inv_freq, scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # as transformers registers it

    def forward(self, t: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(t, device=device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def llama3_inv_freq(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    """transformers' _compute_llama3_parameters."""
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old = float(s["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = placeholder(width)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # transformers' LlamaRMSNorm, to the bit
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        # Half-precision activations: the same float32 arithmetic (a half times a float32 is
        # computed in float32), written so that autograd keeps x itself rather than a float32
        # copy of it (61 such copies are 15% of a SmolLM-135M step's saved activations).
        norm = torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True, dtype=torch.float32)
        h = x * torch.rsqrt(norm * norm / x.size(-1) + self.eps)
        return self.weight * h.to(x.dtype)


class LayerNorm(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = placeholder(width)
        self.bias = placeholder(width)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(q k^T * scale + causal mask) v, the softmax in float32 (transformers' eager)."""
    t = q.size(2)
    scores = torch.matmul(q, k.transpose(2, 3)) * scale
    mask = torch.full((t, t), float("-inf"), device=q.device, dtype=scores.dtype).triu(1)
    weights = F.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v)


class LlamaAttention(nn.Module):
    def __init__(self, config: dict, head_dim: int, qkv_bias: bool, o_bias: bool):
        super().__init__()
        width = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = head_dim
        self.q_proj = Linear(width, self.heads * head_dim, qkv_bias)
        self.k_proj = Linear(width, self.kv_heads * head_dim, qkv_bias)
        self.v_proj = Linear(width, self.kv_heads * head_dim, qkv_bias)
        self.o_proj = Linear(self.heads * head_dim, width, o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # as transformers casts them to the activations' type
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        repeat = self.heads // self.kv_heads  # grouped query attention: each key/value head serves `repeat`
        if repeat > 1:
            k = k[:, :, None].expand(b, self.kv_heads, repeat, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
            v = v[:, :, None].expand(b, self.kv_heads, repeat, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
        y = causal_attention(q, k, v, self.head_dim ** -0.5)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, config: dict, bias: bool):
        super().__init__()
        width, inner = config["hidden_size"], config["intermediate_size"]
        self.gate_proj = Linear(width, inner, bias)
        self.up_proj = Linear(width, inner, bias)
        self.down_proj = Linear(inner, width, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, config: dict, head_dim: int, family: str):
        super().__init__()
        qkv_bias = family == "qwen2" or bool(config.get("attention_bias", False))
        o_bias = family != "qwen2" and bool(config.get("attention_bias", False))
        eps = float(config.get("rms_norm_eps", 1e-6))
        self.self_attn = LlamaAttention(config, head_dim, qkv_bias, o_bias)
        self.mlp = LlamaMLP(config, bool(config.get("mlp_bias", False)))
        self.input_layernorm = RMSNorm(config["hidden_size"], eps)
        self.post_attention_layernorm = RMSNorm(config["hidden_size"], eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: dict, family: str):
        super().__init__()
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        self.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.embed_tokens.weight = placeholder(config["vocab_size"], config["hidden_size"])
        self.layers = nn.ModuleList([LlamaLayer(config, head_dim, family)
                                     for _ in range(config["num_hidden_layers"])])
        self.norm = RMSNorm(config["hidden_size"], float(config.get("rms_norm_eps", 1e-6)))
        self.rotary_emb = Rotary(config, head_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        cos, sin = self.rotary_emb(ids.size(1), ids.device)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class GPT2Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(width, 3 * width)
        self.c_proj = Conv1D(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        d = c // self.heads
        q = q.view(b, t, self.heads, d).transpose(1, 2)
        k = k.view(b, t, self.heads, d).transpose(1, 2)
        v = v.view(b, t, self.heads, d).transpose(1, 2)
        y = causal_attention(q, k, v, 1.0 / math.sqrt(d)).transpose(1, 2).reshape(b, t, c)
        return self.c_proj(y)


class GPT2MLP(nn.Module):
    def __init__(self, width: int, inner: int):
        super().__init__()
        self.c_fc = Conv1D(width, inner)
        self.c_proj = Conv1D(inner, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))  # gelu_new
        return self.c_proj(h)


class GPT2Block(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        width = config["n_embd"]
        eps = float(config.get("layer_norm_epsilon", 1e-5))
        self.ln_1 = LayerNorm(width, eps)
        self.attn = GPT2Attention(width, config["n_head"])
        self.ln_2 = LayerNorm(width, eps)
        self.mlp = GPT2MLP(width, config.get("n_inner") or 4 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        width = config["n_embd"]
        self.wte = nn.Embedding(config["vocab_size"], width)
        self.wte.weight = placeholder(config["vocab_size"], width)
        self.wpe = nn.Embedding(config["n_positions"], width)
        self.wpe.weight = placeholder(config["n_positions"], width)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config["n_layer"])])
        self.ln_f = LayerNorm(width, float(config.get("layer_norm_epsilon", 1e-5)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.size(1), device=ids.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy over the targets that are not -100 (already the next tokens)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-100)


def head_for(config: dict, embed: nn.Embedding, width: int, tied_by_default: bool) -> nn.Linear:
    """lm_head: the embedding's tensor under tie_word_embeddings, else a weight of its own."""
    head = nn.Linear(width, config["vocab_size"], bias=False)
    tied = config.get("tie_word_embeddings", tied_by_default)
    head.weight = embed.weight if tied else placeholder(config["vocab_size"], width)
    return head


class LlamaForCausalLM(nn.Module):
    """transformers' LlamaForCausalLM (and Mistral's, Qwen2's): model., lm_head."""

    def __init__(self, config: dict, family: str, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.model = LlamaModel(config, family)
        self.lm_head = head_for(config, self.model.embed_tokens, config["hidden_size"], False)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if ids.size(1) > self.block_size:
            raise RuntimeError("a window longer than the model's --block-size")
        logits = self.lm_head(self.model(ids))
        return logits, next_token_loss(logits, targets)


class GPT2LMHeadModel(nn.Module):
    """transformers' GPT2LMHeadModel: transformer., lm_head (tied to wte)."""

    def __init__(self, config: dict, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.transformer = GPT2Model(config)
        self.lm_head = head_for(config, self.transformer.wte, config["n_embd"], True)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        if ids.size(1) > self.block_size:
            raise RuntimeError("a window longer than the model's --block-size")
        logits = self.lm_head(self.transformer(ids))
        return logits, next_token_loss(logits, targets)


def check_config(config: dict, block_size: int) -> str:
    """The family of `config`, or Refused naming the key this cannot honour."""
    family = config.get("model_type")
    if family not in FAMILIES:
        raise Refused(f"model_type {family!r}: tools/hf_model.py builds {', '.join(FAMILIES)}")
    if config.get("quantization_config"):
        raise Refused("quantization_config: quantized weights (pstrain trains float weights: use the unquantized model)")
    if family == "gpt2":
        act = config.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh"):
            raise Refused(f"activation_function {act!r}: GPT-2's is gelu_new")
        for key in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
            if config.get(key):
                raise Refused(f"{key}: true is not GPT-2's attention")
        if config.get("scale_attn_weights") is False:
            raise Refused("scale_attn_weights: false is not GPT-2's attention")
        limit = config.get("n_positions", 1024)
    else:
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise Refused(f"hidden_act {act!r}: the {family} family's MLP is SiLU-gated")
        scaling = config.get("rope_scaling")
        if scaling is not None:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind not in ("default", "llama3"):
                raise Refused(f"rope_scaling type {kind!r}: tools/hf_model.py computes RoPE's default and llama3's")
        if config.get("partial_rotary_factor", 1.0) != 1.0:
            raise Refused("partial_rotary_factor: RoPE over part of each head")
        window = config.get("sliding_window")
        uses_window = config.get("use_sliding_window", family == "mistral")
        if uses_window and window is not None and window < block_size:
            raise Refused(f"sliding_window {window}: shorter than --block-size {block_size} (make --block-size at "
                          f"most {window}: the window then covers every window pstrain trains on)")
        limit = config.get("max_position_embeddings", block_size)
    if block_size > limit:
        raise Refused(f"max_position_embeddings {limit}: --block-size {block_size} is longer")
    return family


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("hub_dir", help="the model's folder as the hub lays it out (its config.json)")
    parser.add_argument("output", help="the TorchScript file to write")
    parser.add_argument("--block-size", type=int, required=True, help="the longest window (pstrain's --block-size)")
    parser.add_argument("--lora", type=int, default=0, metavar="R", help="LoRA adapters of rank R; the base frozen")
    parser.add_argument("--lora-alpha", type=float, default=16.0, help="LoRA's alpha (the adapters' scale is alpha / R)")
    parser.add_argument("--lora-targets", help="the projections that get adapters (default: PEFT's for the family)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the adapters' initial values")
    args = parser.parse_args()
    try:
        with open(os.path.join(args.hub_dir, "config.json")) as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise Refused("config.json: not a JSON object")
        if args.block_size < 1 or args.lora < 0:
            raise Refused("--block-size must be 1 or more, --lora 0 or more")
        family = check_config(config, args.block_size)
        targets = (args.lora_targets or DEFAULT_TARGETS[family]).split(",")
        torch.manual_seed(args.seed)
        model = GPT2LMHeadModel(config, args.block_size) if family == "gpt2" else \
            LlamaForCausalLM(config, family, args.block_size)
        modules = add_lora(model, args.lora, args.lora_alpha, targets) if args.lora else []
        unused = [t for t in targets if not any(m == t or m.endswith("." + t) for m in modules)] if args.lora else []
        if unused:
            raise Refused(f"--lora-targets {','.join(unused)}: the {family} family has no such projection")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"hf_model.py: {args.hub_dir}: {e!r}", file=sys.stderr)
        sys.exit(2)
    except Refused as e:
        print(f"hf_model.py: {args.hub_dir}/config.json: {e}; nothing written", file=sys.stderr)
        sys.exit(2)
    lora = None
    if args.lora:
        for name, p in model.named_parameters():
            p.requires_grad_(".lora_" in name)
        lora = {"r": args.lora, "alpha": args.lora_alpha, "targets": targets, "modules": modules}
    facts = {"hf": {"model_type": family, "base_model_prefix": BASE_PREFIX[family],
                    "ignore_unexpected": IGNORED.get(family, []), "block_size": args.block_size, "config": config,
                    "lora": lora, "hub_dir": os.path.abspath(args.hub_dir)},
             "weights": "from --init-from"}
    save(model, args.output, facts=facts)
    count = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{args.output}: {family}, {count} parameters ({trained} trained{f', LoRA rank {args.lora} on ' + ','.join(targets) if args.lora else ''}), "
          f"block size {args.block_size}; its weights come from --init-from {args.hub_dir}")


if __name__ == "__main__":
    main()
