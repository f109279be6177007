"""Dense Llama-style decoder-only transformer.

Pre-norm blocks with RMSNorm, rotary position embeddings (the HF/Llama "rotate_half"
convention), grouped-query causal attention and a SwiGLU MLP; no biases anywhere.
Parameter names and layouts map 1:1 onto `transformers.LlamaForCausalLM`:

    tok_embeddings           -> model.embed_tokens
    layers.i.attention.wq    -> model.layers.i.self_attn.q_proj   (also wk/k, wv/v, wo/o)
    layers.i.feed_forward.w1 -> model.layers.i.mlp.gate_proj      (w3: up_proj, w2: down_proj)
    layers.i.attention_norm  -> model.layers.i.input_layernorm
    layers.i.ffn_norm        -> model.layers.i.post_attention_layernorm
    norm                     -> model.norm
    output                   -> lm_head
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from repro.runtime.shapes import ModelConfig

# Every parameter may carry a leading "config" dimension K (torch.func.functional_call with stacked
# parameters): K models of one shape then train in one pass, config k's weights acting on x[k] of
# activations [K, B, T, d]. The unstacked model is the K-less special case and runs the usual
# kernels.


def per_config(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A vector weight [d] as is, or a stacked one [K, d] shaped to broadcast over x [K, ..., d]."""
    if weight.ndim == 1:
        return weight
    return weight.view(weight.shape[0], *[1] * (x.ndim - 2), weight.shape[1])


class _StackedLinear(torch.autograd.Function):
    """bmm(x, weight.mT) for x [K, N, in] and weight [K, out, in], whose weight gradient is
    computed as bmm(grad.mT, x): already in the weight's layout, so autograd does not copy it
    (autograd's own bmm backward yields the transpose of a [K, in, out] product). The backward
    runs in the gradient's dtype (under autocast, bf16); autograd casts each result back to its
    input's dtype."""

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, weight.mT)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        dtype = grad.dtype
        grad_x = torch.bmm(grad, weight.to(dtype)) if ctx.needs_input_grad[0] else None
        grad_weight = torch.bmm(grad.mT, x.to(dtype)) if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T for weight [out, in]; for a stacked weight [K, out, in], one batched matmul
    applying config k's matrix to x[k] (x: [K, ..., in])."""
    if weight.ndim == 2:
        return F.linear(x, weight)
    K, n_out, n_in = weight.shape
    return _StackedLinear.apply(x.reshape(K, -1, n_in), weight).view(*x.shape[:-1], n_out)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 (as in HF Llama)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return per_config(self.weight, x) * x32.to(x.dtype)


def rotary_tables(
    head_dim: int, max_seq_len: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape [max_seq_len, head_dim] for the rotate_half convention."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, heads, T, head_dim] by position; cos/sin are [T, head_dim]."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.d_model, config.n_heads * config.head_dim, bias=False)
        self.wk = nn.Linear(config.d_model, config.n_kv_heads * config.head_dim, bias=False)
        self.wv = nn.Linear(config.d_model, config.n_kv_heads * config.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * config.head_dim, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [..., T, d_model]; leading dims (batch, or configs x batch) are one batch to
        attention."""
        T = x.shape[-2]
        q = linear(x, self.wq.weight).reshape(-1, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = linear(x, self.wk.weight).reshape(-1, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = linear(x, self.wv.weight).reshape(-1, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            # Grouped-query attention: kv head j serves query heads j*rep .. (j+1)*rep - 1.
            rep = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return linear(
            y.transpose(1, 2).reshape(*x.shape[:-1], self.n_heads * self.head_dim), self.wo.weight
        )


class FeedForward(nn.Module):
    """SwiGLU MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.w2 = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.w3 = nn.Linear(config.d_model, config.d_ff, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(F.silu(linear(x, self.w1.weight)) * linear(x, self.w3.weight), self.w2.weight)


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rotary_tables(config.head_dim, config.max_seq_len, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """N(0, init_std) for embeddings and matrices; the residual output projections
        (attention.wo, feed_forward.w2) use init_std / sqrt(2 * n_layers) (GPT-2 scaling);
        norm weights are 1. A tied matrix is initialised once, as an embedding."""
        std = self.config.init_std
        nn.init.normal_(self.tok_embeddings.weight, 0.0, std)
        if not self.config.tie_embeddings:
            nn.init.normal_(self.output.weight, 0.0, std)
        residual_std = std / math.sqrt(2 * self.config.n_layers)
        for layer in self.layers:
            for lin in (
                layer.attention.wq,
                layer.attention.wk,
                layer.attention.wv,
                layer.feed_forward.w1,
                layer.feed_forward.w3,
            ):
                nn.init.normal_(lin.weight, 0.0, std)
            for lin in (layer.attention.wo, layer.feed_forward.w2):
                nn.init.normal_(lin.weight, 0.0, residual_std)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: LongTensor [B, T] with T <= max_seq_len -> logits FloatTensor [B, T, vocab_size];
        with stacked parameters (functional_call), tokens [K, B, T] -> logits [K, B, T, vocab_size]
        of K models, each on its own tokens."""
        T = tokens.shape[-1]
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len={self.config.max_seq_len}")
        embedding = self.tok_embeddings.weight
        if embedding.ndim == 2:
            x = F.embedding(tokens, embedding)
        else:  # config k looks up rows k * vocab + token of the flattened [K * vocab, d] table
            K, vocab, d = embedding.shape
            offsets = torch.arange(K, device=tokens.device).view(K, 1, 1) * vocab
            x = F.embedding(tokens + offsets, embedding.reshape(K * vocab, d))
        cos, sin = self.rope_cos[:T].to(x.dtype), self.rope_sin[:T].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return linear(self.norm(x), self.output.weight)

    def num_params(self, non_embedding: bool = False) -> int:
        """Unique parameters; non_embedding excludes the token embedding and the output
        head matrix (one matrix if tied)."""
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a tied matrix once
        if non_embedding:
            n -= self.tok_embeddings.weight.numel()
            if not self.config.tie_embeddings:
                n -= self.output.weight.numel()
        return n
