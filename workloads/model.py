"""A decoder-only Transformer language model and its named sizes.

Pre-norm blocks (LayerNorm, causal self-attention, LayerNorm, GELU feed-forward), learned
absolute position embeddings, a final LayerNorm and an *untied* output projection: the token
embedding and ``lm_head`` are separate parameters, so every parameter tensor has exactly one
gradient hook firing per backward. No dropout anywhere, so training is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB_SIZE = 10_000
INIT_STD = 0.02


@dataclass(frozen=True)
class ModelConfig:
    """Shape of one model size; the context length is chosen per run."""

    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int = VOCAB_SIZE

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} not divisible by {self.num_heads} heads")


MODEL_SIZES: dict[str, ModelConfig] = {
    "tiny": ModelConfig(d_model=64, d_ff=256, num_layers=2, num_heads=4),
    # For 2 gloo ranks on CPUs (run_profiles.sh's CPU default): at 2 x 64 tokens per rank its
    # backward takes about as long as naive's all-reduces, so the variants differ visibly.
    "cpu": ModelConfig(d_model=256, d_ff=1024, num_layers=4, num_heads=4),
    "small": ModelConfig(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "medium": ModelConfig(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
    "large": ModelConfig(d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
    "xl": ModelConfig(d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
    "2.7B": ModelConfig(d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
}


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions <= t."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (
            z.view(b, t, self.num_heads, d // self.num_heads).transpose(1, 2) for z in (q, k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    """Two linear maps with a GELU between them."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + ffn(norm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config.d_model, config.num_heads)
        self.norm_ffn = nn.LayerNorm(config.d_model)
        self.ffn = FeedForward(config.d_model, config.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm_attn(x))
        return x + self.ffn(self.norm_ffn(x))


class TransformerLM(nn.Module):
    """Token ids ``(batch, time)`` to next-token logits ``(batch, time, vocab)``."""

    def __init__(self, config: ModelConfig, context_length: int) -> None:
        super().__init__()
        self.config = config
        self.context_length = context_length
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(context_length, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm_out = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm_out(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position of the (local) batch."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
