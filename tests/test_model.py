import math

import pytest
import torch

from repro.bench.peers import hf_llama, hf_state_dict
from repro.runtime.model import Transformer
from repro.runtime.shapes import (
    SIZES,
    ModelConfig,
    flops_per_token,
    model_config,
    param_count_table,
)

VOCAB = 256


def small_config(**overrides) -> ModelConfig:
    fields = dict(
        vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=160, max_seq_len=64
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def tokens(batch: int, seq_len: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def test_forward_shape():
    model = Transformer(small_config())
    logits = model(tokens(3, 17))
    assert logits.shape == (3, 17, VOCAB)
    assert logits.dtype == torch.float32


def test_parameter_names():
    names = {n for n, _ in Transformer(small_config(n_layers=1)).named_parameters()}
    assert names == {
        "tok_embeddings.weight",
        "layers.0.attention.wq.weight",
        "layers.0.attention.wk.weight",
        "layers.0.attention.wv.weight",
        "layers.0.attention.wo.weight",
        "layers.0.feed_forward.w1.weight",
        "layers.0.feed_forward.w2.weight",
        "layers.0.feed_forward.w3.weight",
        "layers.0.attention_norm.weight",
        "layers.0.ffn_norm.weight",
        "norm.weight",
        "output.weight",
    }


@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_causal(n_kv_heads):
    model = Transformer(small_config(n_kv_heads=n_kv_heads)).eval()
    x = tokens(2, 20)
    y = x.clone()
    y[:, 12] = (y[:, 12] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-6)
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-4


def test_seq_too_long():
    model = Transformer(small_config(max_seq_len=16))
    model(tokens(1, 16))
    with pytest.raises(ValueError, match="max_seq_len"):
        model(tokens(1, 17))


def test_tied_embeddings():
    untied = Transformer(small_config())
    tied = Transformer(small_config(tie_embeddings=True))
    assert tied.output.weight is tied.tok_embeddings.weight
    assert untied.output.weight is not untied.tok_embeddings.weight

    def total(m):
        return sum(p.numel() for p in m.parameters())

    assert total(untied) - total(tied) == VOCAB * 64
    assert tied.num_params() == total(tied)
    assert untied.num_params() == total(untied)


@pytest.mark.parametrize("tie", [False, True])
def test_num_params_non_embedding(tie):
    c = small_config(tie_embeddings=tie, n_kv_heads=2)
    model = Transformer(c)
    d, head_dim = 64, 16
    per_layer = d * 4 * head_dim + 2 * d * 2 * head_dim + 4 * head_dim * d + 3 * d * 160 + 2 * d
    expected = 2 * per_layer + d
    assert model.num_params(non_embedding=True) == expected
    assert model.num_params() == expected + (1 if tie else 2) * VOCAB * d


def test_gqa():
    model = Transformer(small_config(n_kv_heads=1))
    assert model.layers[0].attention.wk.weight.shape == (16, 64)
    assert model.layers[0].attention.wq.weight.shape == (64, 64)
    assert model(tokens(2, 9)).shape == (2, 9, VOCAB)
    with pytest.raises(ValueError, match="n_kv_heads"):
        small_config(n_kv_heads=3)


def test_init():
    c = model_config("cpu-l", VOCAB)
    model = Transformer(c)
    layer = model.layers[0]
    assert layer.attention.wq.weight.std().item() == pytest.approx(c.init_std, rel=0.05)
    residual_std = c.init_std / math.sqrt(2 * c.n_layers)
    assert layer.attention.wo.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert layer.feed_forward.w2.weight.std().item() == pytest.approx(residual_std, rel=0.05)
    assert model.tok_embeddings.weight.std().item() == pytest.approx(c.init_std, rel=0.05)
    assert torch.all(model.norm.weight == 1) and torch.all(layer.ffn_norm.weight == 1)


def test_model_config_sizes():
    c = model_config("600m", 128256, tie_embeddings=True)
    shape = (c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff, c.max_seq_len)
    assert shape == (1024, 24, 16, 8, 3584, 4096)
    assert c.tie_embeddings and c.vocab_size == 128256
    for name in ("nano", "tiny", "cpu-xs", "cpu-s", "cpu-m", "cpu-l"):
        assert model_config(name, VOCAB).max_seq_len == 512


def test_unknown_size():
    with pytest.raises(
        ValueError, match=r"unknown model size 'huge'; choose one of: nano, tiny, "
    ) as err:
        model_config("huge", VOCAB)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["tiny", "cpu-xs", "cpu-s", "cpu-m"])
def test_param_count_table_matches_models(name):
    row = {r["name"]: r for r in param_count_table(VOCAB)}[name]
    assert row["d_model"] == SIZES[name].d_model
    untied = Transformer(model_config(name, VOCAB))
    tied = Transformer(model_config(name, VOCAB, tie_embeddings=True))
    assert row["params"] == untied.num_params()
    assert row["params_tied"] == tied.num_params()
    assert row["params_non_embedding"] == untied.num_params(non_embedding=True)
    assert row["params_non_embedding"] == tied.num_params(non_embedding=True)


def test_param_count_table_ladder():
    rows = {r["name"]: r for r in param_count_table(128256)}
    assert list(rows) == list(SIZES)
    # Size names are the untied totals with the Llama-3 vocabulary (within 10%).
    for name, approx in [
        ("150m", 150e6),
        ("300m", 300e6),
        ("600m", 600e6),
        ("1.4b", 1.4e9),
        ("1.5b", 1.5e9),
    ]:
        assert rows[name]["params"] == pytest.approx(approx, rel=0.1)


def test_flops_per_token():
    c = small_config()
    model = Transformer(c)
    n = model.num_params(non_embedding=True) + VOCAB * 64
    assert flops_per_token(c, 32) == 6 * n + 12 * 2 * 64 * 32
    tied = small_config(tie_embeddings=True)
    assert flops_per_token(tied, 32) == flops_per_token(c, 32)


# --- Oracle: transformers.LlamaForCausalLM with our weights copied in ---------------------


def oracle_max_abs_diff(
    config: ModelConfig, batch: int = 2, seq_len: int = 48, seed: int = 0
) -> float:
    """Max |logits_ours - logits_hf| (float32) for a random model of this config."""
    torch.manual_seed(seed)
    ours = Transformer(config).eval()
    with torch.no_grad():  # non-unit norms so a mis-mapped norm would show
        for p in ours.parameters():
            if p.ndim == 1:
                p.uniform_(0.5, 1.5)
    hf = hf_llama(config, "cpu", attention="eager").eval()
    hf.load_state_dict(hf_state_dict(ours), strict=True)
    if config.tie_embeddings:
        assert hf.lm_head.weight is hf.model.embed_tokens.weight
    x = tokens(batch, seq_len, seed)
    with torch.no_grad():
        diff = (ours(x) - hf(x).logits).abs().max().item()
    heads = f"{config.n_kv_heads}/{config.n_heads}"
    print(f"oracle max abs logit diff (tie={config.tie_embeddings}, kv/heads={heads}): {diff:.3g}")
    return diff


@pytest.mark.parametrize(
    "config",
    [
        small_config(),
        small_config(tie_embeddings=True),
        small_config(n_kv_heads=2),
        small_config(n_kv_heads=1, tie_embeddings=True),
    ],
    ids=["untied", "tied", "gqa", "mqa-tied"],
)
def test_matches_hf_llama(config):
    assert oracle_max_abs_diff(config) < 1e-4
