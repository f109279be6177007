"""Model sizes and what follows from a shape alone, without torch: the ModelConfig of a named
size (SIZES), parameter counts and training FLOPs per token (repro plan, presets and the command
line use them without importing torch; repro.runtime.model builds the network)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int  # n_heads for multi-head attention; fewer for grouped-query attention
    d_ff: int  # hidden width of the SwiGLU MLP
    max_seq_len: int  # tokens; rotary tables are built for this length
    tie_embeddings: bool = False  # output head shares the token-embedding matrix
    rope_theta: float = 10000.0  # Kim et al.'s ladder (Levanter's default)
    norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class ModelShape:
    """Architecture of one model size, independent of the vocabulary."""

    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_seq_len: int  # tokens


SIZES: dict[str, ModelShape] = {
    # CPU sizes for a 2-core laptop; "tiny" is for tests and CI smoke runs.
    "nano": ModelShape(16, 2, 2, 2, 48, 512),
    "tiny": ModelShape(32, 2, 2, 2, 96, 512),
    "cpu-xs": ModelShape(64, 2, 2, 2, 176, 512),
    "cpu-s": ModelShape(96, 3, 3, 3, 256, 512),
    "cpu-m": ModelShape(128, 4, 4, 4, 352, 512),
    "cpu-l": ModelShape(192, 6, 6, 6, 512, 512),
    # The paper's ladder; names are total (untied) parameters with the Llama-3 vocabulary.
    "150m": ModelShape(512, 6, 8, 8, 1792, 4096),
    "300m": ModelShape(768, 12, 12, 12, 2688, 4096),
    "600m": ModelShape(1024, 24, 16, 8, 3584, 4096),
    "1.4b": ModelShape(2048, 16, 16, 8, 7168, 4096),
    "1.5b": ModelShape(1536, 36, 16, 8, 5376, 4096),
}


def by_size(models: Iterable[str], largest_first: bool = False) -> list[str]:
    """Names of SIZES from the smallest model to the largest (SIZES is in that order), or the
    largest first; names not in SIZES (hand-made data) after them, by name."""
    order = list(SIZES)
    known = sorted((m for m in models if m in SIZES), key=order.index, reverse=largest_first)
    return known + sorted(m for m in models if m not in SIZES)


def model_config(size: str, vocab_size: int, tie_embeddings: bool = False) -> ModelConfig:
    """The ModelConfig of a named size from SIZES."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choose one of: {', '.join(SIZES)}")
    s = SIZES[size]
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=s.d_model,
        n_layers=s.n_layers,
        n_heads=s.n_heads,
        n_kv_heads=s.n_kv_heads,
        d_ff=s.d_ff,
        max_seq_len=s.max_seq_len,
        tie_embeddings=tie_embeddings,
    )


# --- stacked weights ----------------------------------------------------------------------------


def _non_embedding_params(config: ModelConfig) -> int:
    """Parameters in the blocks and the final norm, computed from the shape."""
    d, h = config.d_model, config.head_dim
    attention = d * h * (2 * config.n_heads + 2 * config.n_kv_heads)  # wq, wo; wk, wv
    mlp = 3 * d * config.d_ff
    norms = 2 * d
    return config.n_layers * (attention + mlp + norms) + d


def parameter_count(config: ModelConfig) -> int:
    """Parameters of a model of this config (one matrix if tied), computed from the shape."""
    embeddings = (1 if config.tie_embeddings else 2) * config.vocab_size * config.d_model
    return _non_embedding_params(config) + embeddings


def param_count_table(vocab_size: int) -> list[dict]:
    """One row per entry of SIZES with shape and parameter counts (computed arithmetically)."""
    rows = []
    for name, shape in SIZES.items():
        config = model_config(name, vocab_size)
        rows.append(
            {
                "name": name,
                "d_model": shape.d_model,
                "n_layers": shape.n_layers,
                "n_heads": shape.n_heads,
                "n_kv_heads": shape.n_kv_heads,
                "d_ff": shape.d_ff,
                "params": parameter_count(config),
                "params_tied": parameter_count(model_config(name, vocab_size, True)),
                "params_non_embedding": _non_embedding_params(config),
            }
        )
    return rows


def flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward) at sequence length seq_len (tokens).

    6 * N + 12 * n_layers * d_model * seq_len (Kaplan et al. 2020; PaLM appendix B), where
    N = non-embedding parameters + vocab_size * d_model: the output-head matmul counts
    (tied or not) but the embedding lookup does not. The second term is the attention
    score and value matmuls, counted without the causal-mask saving.
    """
    n = _non_embedding_params(config) + config.vocab_size * config.d_model
    return 6.0 * n + 12.0 * config.n_layers * config.d_model * seq_len
