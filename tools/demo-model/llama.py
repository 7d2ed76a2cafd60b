"""A Llama-architecture decoder in plain PyTorch with Hugging Face's parameter names and maths
(RMSNorm, rotate-half RoPE, grouped-query attention, SiLU-gated MLP), plus the two kinds of
adapter the demo ships: LoRA on any projection, and Medusa heads on the final hidden state."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PROJECTIONS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']


@dataclass
class LlamaConfig:
    vocab_size: int
    hidden_size: int = 256
    intermediate_size: int = 704
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Proj(nn.Linear):
    """A bias-free projection that adds `scale · B(A x)` when a LoRA pair is attached."""

    def __init__(self, fan_in, fan_out):
        super().__init__(fan_in, fan_out, bias=False)
        self.lora = None  # (A [r, in], B [out, r], scale) or None

    def forward(self, x):
        y = F.linear(x, self.weight)
        if self.lora is not None:
            a, b, scale = self.lora
            y = y + scale * F.linear(F.linear(x, a), b)
        return y


def rope_tables(cfg, positions):
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = Proj(h, cfg.num_attention_heads * d)
        self.k_proj = Proj(h, cfg.num_key_value_heads * d)
        self.v_proj = Proj(h, cfg.num_key_value_heads * d)
        self.o_proj = Proj(cfg.num_attention_heads * d, h)

    def forward(self, x, cos, sin, past=None):
        b, t, _ = x.shape
        cfg = self.cfg
        d = cfg.head_dim
        q = self.q_proj(x).view(b, t, cfg.num_attention_heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, cfg.num_key_value_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, cfg.num_key_value_heads, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        present = (k, v)
        groups = cfg.num_attention_heads // cfg.num_key_value_heads
        kk = k.repeat_interleave(groups, dim=1)
        vv = v.repeat_interleave(groups, dim=1)
        scores = (q @ kk.transpose(-1, -2)) / math.sqrt(d)
        s = kk.shape[2]
        if t > 1:
            mask = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
            scores = scores.masked_fill(~mask, float('-inf'))
        out = (scores.softmax(-1) @ vv).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out), present


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = Proj(cfg.hidden_size, cfg.intermediate_size)
        self.up_proj = Proj(cfg.hidden_size, cfg.intermediate_size)
        self.down_proj = Proj(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, past=None):
        a, present = self.self_attn(self.input_layernorm(x), cos, sin, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), present


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        # GPT-2 style: std 0.02, residual-branch outputs shrunk by 1/sqrt(2·layers).
        for name, p in self.named_parameters():
            if name.endswith('norm.weight') or 'layernorm' in name:
                nn.init.ones_(p)
            elif name.endswith('o_proj.weight') or name.endswith('down_proj.weight'):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * self.cfg.num_hidden_layers))
            else:
                nn.init.normal_(p, std=0.02)

    def hidden(self, ids, past=None, start=0):
        """Final hidden states (after the last RMSNorm, what the LM head and Medusa heads read)."""
        t = ids.shape[1]
        cos, sin = rope_tables(self.cfg, torch.arange(start, start + t))
        x = self.model.embed_tokens(ids)
        presents = []
        for i, layer in enumerate(self.model.layers):
            x, p = layer(x, cos, sin, None if past is None else past[i])
            presents.append(p)
        return self.model.norm(x), presents

    def forward(self, ids):
        return self.lm_head(self.hidden(ids)[0])

    def projections(self):
        """`(layer, module name, Proj)` for every projection, in PEFT's order."""
        for l, layer in enumerate(self.model.layers):
            for m in PROJECTIONS:
                block = layer.mlp if m in ('gate_proj', 'up_proj', 'down_proj') else layer.self_attn
                yield l, m, getattr(block, m)

    @torch.no_grad()
    def generate_greedy(self, prompts, max_new_tokens, eos_id=None):
        """Greedy continuations of equal-length prompts `[b, t]` with a KV cache: returns `[b, new]`."""
        h, past = self.hidden(prompts)
        nxt = self.lm_head(h[:, -1]).argmax(-1)
        out = [nxt]
        pos = prompts.shape[1]
        for _ in range(max_new_tokens - 1):
            h, past = self.hidden(nxt[:, None], past, pos)
            pos += 1
            nxt = self.lm_head(h[:, -1]).argmax(-1)
            out.append(nxt)
        return torch.stack(out, dim=1)


class Lora(nn.Module):
    """PEFT-style LoRA: A random (Kaiming-uniform, as PEFT), B zero, so training starts at the base."""

    def __init__(self, model, rank, alpha, targets):
        super().__init__()
        self.rank, self.alpha, self.targets = rank, alpha, list(targets)
        self.scale = alpha / rank
        self.a = nn.ParameterDict()
        self.b = nn.ParameterDict()
        for l, m, proj in model.projections():
            if m in self.targets:
                key = f'{l}_{m}'
                a = torch.empty(rank, proj.in_features)
                nn.init.kaiming_uniform_(a, a=math.sqrt(5))
                self.a[key] = nn.Parameter(a)
                self.b[key] = nn.Parameter(torch.zeros(proj.out_features, rank))

    def attach(self, model):
        for l, m, proj in model.projections():
            key = f'{l}_{m}'
            proj.lora = (self.a[key], self.b[key], self.scale) if key in self.a else None

    @staticmethod
    def detach(model):
        for _, _, proj in model.projections():
            proj.lora = None

    def peft_state_dict(self, model):
        out = {}
        for l, m, _ in model.projections():
            key = f'{l}_{m}'
            if key in self.a:
                block = 'mlp' if m in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'
                prefix = f'base_model.model.model.layers.{l}.{block}.{m}'
                out[f'{prefix}.lora_A.weight'] = self.a[key].detach().clone()
                out[f'{prefix}.lora_B.weight'] = self.b[key].detach().clone()
        return out


class MedusaHeads(nn.Module):
    """Head h: `x_h = x + SiLU(W_h x + b_h)` (one residual block), then an LM head. With
    `own_lm_head` (Medusa-1 / LoRAX version 1) each head has its own, initialised from the base
    model's; without (LoRAX version 2) the frozen base LM head is reused. W starts at zero, so every
    head starts out predicting what the base model predicts next (Medusa paper's initialisation)."""

    def __init__(self, cfg, num_heads, base_lm_head, own_lm_head):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(cfg.hidden_size, cfg.hidden_size) for _ in range(num_heads))
        for b in self.blocks:
            nn.init.zeros_(b.weight)
            nn.init.zeros_(b.bias)
        self.base_lm_head = base_lm_head
        self.heads_lm = None
        if own_lm_head:
            self.heads_lm = nn.ParameterList(
                nn.Parameter(base_lm_head.weight.detach().clone()) for _ in range(num_heads))

    def forward(self, x):
        """`x` `[..., hidden]` → logits `[..., heads, vocab]`."""
        outs = []
        for h, block in enumerate(self.blocks):
            y = x + F.silu(block(x))
            w = self.base_lm_head.weight if self.heads_lm is None else self.heads_lm[h]
            outs.append(F.linear(y, w))
        return torch.stack(outs, dim=-2)

    def lorax_state_dict(self):
        """LoRAX / Medusa-repo names: `{h}.0.linear.weight|bias`, plus `{h}.1.weight` for version 1."""
        out = {}
        for h, block in enumerate(self.blocks):
            out[f'{h}.0.linear.weight'] = block.weight.detach().clone()
            out[f'{h}.0.linear.bias'] = block.bias.detach().clone()
            if self.heads_lm is not None:
                out[f'{h}.1.weight'] = self.heads_lm[h].detach().clone()
        return out
