import math

import pytest
import torch

from repro.runtime.model import Transformer
from repro.runtime.optim import build_optimizer, param_groups
from repro.runtime.schedules import Schedule, beta2_for_batch, lr_multiplier
from repro.runtime.shapes import ModelConfig


def make_model(tie: bool) -> Transformer:
    config = ModelConfig(
        vocab_size=64,
        d_model=16,
        n_layers=2,
        n_heads=2,
        n_kv_heads=1,
        d_ff=32,
        max_seq_len=16,
        tie_embeddings=tie,
    )
    return Transformer(config)


def group_names(model: Transformer) -> dict[str, set[str]]:
    name_of = {id(p): n for n, p in model.named_parameters()}
    return {g: {name_of[id(p)] for p in ps} for g, ps in param_groups(model).items()}


@pytest.mark.parametrize("tie", [False, True])
def test_param_groups(tie):
    model = make_model(tie)
    groups = param_groups(model)
    assert list(groups) == ["matrices", "embeddings", "vectors"]
    names = group_names(model)
    hidden = [
        "attention.wq",
        "attention.wk",
        "attention.wv",
        "attention.wo",
        "feed_forward.w1",
        "feed_forward.w2",
        "feed_forward.w3",
    ]
    # Levanter's default mask: every linear layer decays, an untied output head included
    matrices = {f"layers.{i}.{m}.weight" for i in range(2) for m in hidden}
    matrices |= set() if tie else {"output.weight"}
    vectors = {"norm.weight"} | {
        f"layers.{i}.{m}.weight" for i in range(2) for m in ["attention_norm", "ffn_norm"]
    }
    assert names["matrices"] == matrices
    assert names["vectors"] == vectors
    assert names["embeddings"] == {"tok_embeddings.weight"}  # a tied head is this matrix
    # Every parameter exactly once, by identity.
    flat = [id(p) for ps in groups.values() for p in ps]
    assert len(flat) == len(set(flat))
    assert set(flat) == {id(p) for p in model.parameters()}
    if tie:
        assert len(groups["embeddings"]) == 1 and groups["embeddings"][0] is model.output.weight


def test_param_groups_skip_frozen():
    model = make_model(False)
    model.norm.weight.requires_grad_(False)
    assert all(p is not model.norm.weight for p in param_groups(model)["vectors"])


def test_build_optimizer_groups():
    model = make_model(True)
    opt = build_optimizer(model, lr=3e-3, weight_decay=0.1, embedding_weight_decay=0.01)
    assert isinstance(opt, torch.optim.AdamW)
    by_name = {g["name"]: g for g in opt.param_groups}
    decay = {k: g["weight_decay"] for k, g in by_name.items()}
    assert decay == {"matrices": 0.1, "embeddings": 0.01, "vectors": 0.0}
    assert all(
        g["lr"] == 3e-3 and g["betas"] == (0.9, 0.95) and g["eps"] == 1e-8 for g in opt.param_groups
    )


def test_decoupled_weight_decay_step():
    """With zero gradients from a fresh state the Adam update is 0, leaving
    w <- w * (1 - lr * wd)."""
    model = make_model(False)
    opt = build_optimizer(model, lr=1.0, weight_decay=0.5, embedding_weight_decay=0.25)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    params = dict(model.named_parameters())
    wq = "layers.0.attention.wq.weight"
    torch.testing.assert_close(params[wq], before[wq] * 0.5)
    torch.testing.assert_close(
        params["tok_embeddings.weight"], before["tok_embeddings.weight"] * 0.75
    )
    # Levanter's mask: an untied output head decays with the linear layers
    torch.testing.assert_close(params["output.weight"], before["output.weight"] * 0.5)
    torch.testing.assert_close(params["norm.weight"], before["norm.weight"])


def test_decay_follows_scheduled_lr():
    model = make_model(False)
    opt = build_optimizer(model, lr=1.0, weight_decay=0.5, embedding_weight_decay=0.0)
    w = model.layers[0].feed_forward.w1.weight
    before = w.detach().clone()
    for g in opt.param_groups:
        g["lr"] = 0.2
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(w.detach(), before * (1 - 0.2 * 0.5))


def curve(schedule: Schedule, total: int) -> list[float]:
    return [lr_multiplier(schedule, s, total) for s in range(total)]


def test_warmup():
    lrs = curve(Schedule("cosine", warmup_fraction=0.1), 100)
    assert lrs[:10] == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert lrs[9] == 1.0 and lrs[10] == 1.0
    # ceil: 1% of 150 steps is 2 warmup steps.
    assert curve(Schedule("constant", warmup_fraction=0.01), 150)[:3] == [0.5, 1.0, 1.0]
    # 0.07 * 100 is 7.000000000000001 in floating point; still 7 warmup steps.
    assert curve(Schedule("constant", warmup_fraction=0.07), 100)[6] == 1.0


def test_cosine():
    # ceil(10.2) = 11 warmup steps; the cosine spans steps 11..101 (90 intervals).
    lrs = curve(Schedule("cosine", warmup_fraction=0.1, min_lr_ratio=0.1), 102)
    post = lrs[11:]
    assert lrs[-1] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(post, post[1:]))  # strictly decreasing after warmup
    assert lrs[11 + 45] == pytest.approx(0.55)  # midpoint of the cosine: (1 + min) / 2
    assert min(post) >= 0.1 - 1e-12


def test_wsd():
    lrs = curve(Schedule("wsd", warmup_fraction=0.1, min_lr_ratio=0.0, decay_fraction=0.2), 101)
    # ceil(10.1) = 11 warmup steps, ceil(20.2) = 21 decay steps: stable on [11, 80).
    assert lrs[10] == 1.0 and lrs[9] < 1.0
    assert all(x == 1.0 for x in lrs[11:81])
    decay = lrs[80:]
    assert all(a > b for a, b in zip(decay, decay[1:]))
    assert decay[-1] == pytest.approx(0.0)
    assert decay[10] == pytest.approx(0.5)  # linear midpoint
    ratio = curve(Schedule("wsd", warmup_fraction=0.0, min_lr_ratio=0.2, decay_fraction=0.5), 11)
    assert ratio[-1] == pytest.approx(0.2) and ratio[:6] == [1.0] * 6


def test_wsd_decay_shapes_differ():
    def wsd(shape):
        return Schedule(
            "wsd", warmup_fraction=0.0, min_lr_ratio=0.1, decay_fraction=0.5, decay_shape=shape
        )

    linear, sqrt = curve(wsd("linear"), 21), curve(wsd("1-sqrt"), 21)
    # decay covers steps 10..20; midpoint step 15 has progress 0.5.
    assert linear[15] == pytest.approx(1 - 0.9 * 0.5)
    assert sqrt[15] == pytest.approx(1 - 0.9 * math.sqrt(0.5))
    assert linear[:10] == sqrt[:10] == [1.0] * 10
    assert linear[-1] == pytest.approx(0.1) and sqrt[-1] == pytest.approx(0.1)


def test_constant():
    lrs = curve(Schedule("constant", warmup_fraction=0.05, min_lr_ratio=0.1), 100)
    assert lrs[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert all(x == 1.0 for x in lrs[5:])


def test_no_warmup():
    assert lr_multiplier(Schedule("cosine", warmup_fraction=0.0), 0, 10) == 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="linear"), "unknown schedule 'linear'; choose one of"),
        (dict(name="wsd", decay_shape="sqrt"), "unknown decay shape 'sqrt'"),
        (dict(warmup_fraction=1.5), "warmup_fraction must be in"),
        (dict(decay_fraction=-0.1), "decay_fraction must be in"),
        (dict(min_lr_ratio=2.0), "min_lr_ratio must be in"),
    ],
)
def test_invalid_schedule(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Schedule(**kwargs)


def test_step_out_of_range():
    with pytest.raises(ValueError, match="outside"):
        lr_multiplier(Schedule(), 10, 10)


def test_beta2_for_batch_keeps_the_token_half_life():
    """By hand: 0.95 at 8 x 128 tokens per step is 0.95 ** (1/8) = exp(ln 0.95 / 8) =
    exp(-0.0064117) = 0.993609 at 128 tokens per step, and 0.95 ** 2 = 0.9025 at twice the batch."""
    assert beta2_for_batch(0.95, 8 * 128, 128) == pytest.approx(0.9936088, abs=1e-7)
    assert beta2_for_batch(0.95, 1024, 2048) == pytest.approx(0.9025, abs=1e-12)
    assert beta2_for_batch(0.95, 1024, 1024) == 0.95
    # half-life in tokens: ln 0.5 / ln beta2 steps of batch_tokens each, equal at both batches
    half_life = [math.log(0.5) / math.log(beta2_for_batch(0.95, 1024, t)) * t for t in (128, 1024)]
    assert half_life[0] == pytest.approx(half_life[1], rel=1e-12)
