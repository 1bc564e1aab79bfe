"""Causal LMs as transformers computes them, written apart from tools/hf_model.py (and
checked once against transformers' own modeling_llama.py, modeling_qwen2.py and
modeling_gpt2.py): functions of a dict of the hub's tensors by their *ForCausalLM names,
eager attention, float32. The tests compare pstrain's model files with these.

    logits(config, weights, ids) -> [B, T, vocab]
"""
import math

import torch


def _rms_norm(x, w, eps):
    v = x.float().pow(2).mean(dim=-1, keepdim=True)
    return w * (x.float() / torch.sqrt(v + eps))


def _inv_freq(config, dim):
    base = float(config.get("rope_theta", 10000.0))
    inv = torch.tensor([1.0 / base ** (i / dim) for i in range(0, dim, 2)], dtype=torch.float64)
    s = config.get("rope_scaling")
    if s and s.get("rope_type", s.get("type")) == "llama3":
        old = s["original_max_position_embeddings"]
        out = []
        for f in inv.tolist():
            wavelen = 2 * math.pi / f
            if wavelen < old / s["high_freq_factor"]:
                out.append(f)
            elif wavelen > old / s["low_freq_factor"]:
                out.append(f / s["factor"])
            else:
                smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
                out.append((1 - smooth) * f / s["factor"] + smooth * f)
        inv = torch.tensor(out, dtype=torch.float64)
    return inv.float()


def _rope(x, cos, sin):
    d = x.shape[-1] // 2
    rotated = torch.cat([-x[..., d:], x[..., :d]], dim=-1)
    return x * cos + rotated * sin


def _attend(q, k, v):
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s.float(), dim=-1) @ v


def _llama(config, w, ids):
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    d = config.get("head_dim") or config["hidden_size"] // heads
    eps = config.get("rms_norm_eps", 1e-6)
    qwen = config["model_type"] == "qwen2"
    b, t = ids.shape
    angles = torch.arange(t, dtype=torch.float32)[:, None] * _inv_freq(config, d)[None, :]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    x = w["model.embed_tokens.weight"][ids]

    def proj(name, h):
        out = h @ w[name + ".weight"].t()
        return out + w[name + ".bias"] if name + ".bias" in w else out

    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = proj(p + "self_attn.q_proj", h).view(b, t, heads, d).transpose(1, 2)
        k = proj(p + "self_attn.k_proj", h).view(b, t, kv, d).transpose(1, 2)
        v = proj(p + "self_attn.v_proj", h).view(b, t, kv, d).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        k = torch.repeat_interleave(k, heads // kv, dim=1)
        v = torch.repeat_interleave(v, heads // kv, dim=1)
        y = _attend(q, k, v).transpose(1, 2).reshape(b, t, heads * d)
        x = x + proj(p + "self_attn.o_proj", y)
        h = _rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = proj(p + "mlp.gate_proj", h), proj(p + "mlp.up_proj", h)
        x = x + proj(p + "mlp.down_proj", gate * torch.sigmoid(gate) * up)
        assert not qwen or p + "self_attn.q_proj.bias" in w
    x = _rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.t()


def _gpt2(config, w, ids):
    w = {k if k.startswith("transformer.") or k == "lm_head.weight" else "transformer." + k: v for k, v in w.items()}
    heads, eps = config["n_head"], config.get("layer_norm_epsilon", 1e-5)
    b, t = ids.shape
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]

    def norm(h, name):
        return torch.nn.functional.layer_norm(h, (h.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)

    for i in range(config["n_layer"]):
        p = f"transformer.h.{i}."
        h = norm(x, p + "ln_1")
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        c = x.shape[-1]
        q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in qkv.split(c, dim=-1))
        y = _attend(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = norm(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = norm(x, "transformer.ln_f")
    return x @ w.get("lm_head.weight", w["transformer.wte.weight"]).t()


def logits(config, weights, ids):
    """The logits of `ids` [B, T] under the hub's `weights` (float32 by name)."""
    weights = {k: v.float() for k, v in weights.items()}
    with torch.no_grad():
        return _gpt2(config, weights, ids) if config["model_type"] == "gpt2" else _llama(config, weights, ids)
