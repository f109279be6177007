"""A preset against the paper's regime: the ratios that decide which effects a study can show
(batch / pool, tokens per parameter, epochs, batch / gradient noise scale), the paper's values
of them, and how a preset's study differs from Kim et al.'s recipe."""

from __future__ import annotations

import math

from repro.design.presets import Preset
from repro.runtime.shapes import param_count_table

ZHANG_LAW = (22.9, 0.47)
"""Zhang et al.'s fit of the critical batch to data size, B* = 22.9 D^0.47 (coefficient,
exponent); its units are not stated with it (zhang_critical_batch reads it both ways)."""


def zhang_critical_batch(pool_tokens: float) -> tuple[float, float]:
    """Zhang et al.'s critical batch B* = 22.9 D^0.47 (ZHANG_LAW) at a pool of `pool_tokens`, in
    tokens, under both readings of its units, lowest first: D in millions of tokens and B* in
    sequences of their 512-token context; D and B* in tokens."""
    coefficient, exponent = ZHANG_LAW
    millions = coefficient * (pool_tokens / 1e6) ** exponent * 512
    tokens = coefficient * pool_tokens**exponent
    return min(millions, tokens), max(millions, tokens)


PAPER_NOISE_SCALE = zhang_critical_batch(200e6)
"""The paper's gradient noise scale (lowest, highest; tokens), an estimate, not a measurement:
Kim et al. report none, so this is Zhang et al.'s critical batch B* = 22.9 D^0.47 at the paper's
D = 200M tokens under either reading of its units (zhang_critical_batch), taking the critical
batch for B_simple as McCandlish et al. predict (B_crit ~ B_simple)."""

NOISE_RATIO = "batch / noise scale (tokens)"
"""The ratio of a batch to the gradient noise scale B_simple (both in tokens): notebook 05
measures B_simple; the paper's is PAPER_NOISE_SCALE."""

NOISE_GAP_LIMIT = 0.05
"""nats/token: how far from the tuned loss notebook 05's noise-scale evaluations may lie for their
B_simple to count as the noise scale at that loss (noise.noise_scale_regime's loss gap); beyond it
the regime report says how far above the tuned loss B_simple was measured."""

PAPER_REGIME = {
    "batch / pool (tokens)": (3.3e-4, 1e-2),
    "pool tokens per parameter": (0.13, 1.3),
    "epochs": (1.0, 32.0),
    NOISE_RATIO: (16 * 4096 / PAPER_NOISE_SCALE[1], 512 * 4096 / PAPER_NOISE_SCALE[0]),
}
"""The paper's ratios (Kim et al.'s setup: batches of 16-512 sequences of 4,096 tokens from a
200M-token pool, 150M-1.5B-parameter models, up to 32 epochs; batch / noise scale against the
estimate PAPER_NOISE_SCALE: the smallest batch over the larger estimate, the largest over the
smaller)."""


def describe_regime(regime: dict[str, tuple[float, float]], noise_gap: float = 0.0) -> str:
    """One line per ratio: this study's range, the paper's, and whether it lies inside, covers the
    paper's, overlaps it (and on which part) or lies outside, at two significant digits (the
    precision of the paper's figures). Batch / noise scale says that notebook 05 measured it (NaN:
    not measured yet), at how many nats/token above the tuned loss where its evaluations lie
    farther than NOISE_GAP_LIMIT from it (`noise_gap`: noise.noise_scale_range's), and that the
    paper's is an estimate."""
    lines = []
    for name, (low, high) in regime.items():
        paper_low, paper_high = (float(f"{end:.2g}") for end in PAPER_REGIME[name])
        paper = "paper's estimate" if name == NOISE_RATIO else "paper"
        paper += f" {paper_low:.2g} to {paper_high:.2g}"
        if math.isnan(low):
            lines.append(f"  {name}: not measured yet, notebook 05 measures it ({paper})")
            continue
        low2, high2 = float(f"{low:.2g}"), float(f"{high:.2g}")
        shared = (max(low2, paper_low), min(high2, paper_high))
        if paper_low <= low2 and high2 <= paper_high:
            where = "inside"
        elif low2 <= paper_low and paper_high <= high2:
            where = "covers it"
        elif shared[0] < shared[1]:
            where = f"overlaps it from {shared[0]:.2g} to {shared[1]:.2g}"
        else:
            where = "outside"
        ours = f"{low:.2g}" if low == high else f"{low:.2g} to {high:.2g}"
        if name == NOISE_RATIO:
            ours += ", notebook 05's measurement"
            if noise_gap > NOISE_GAP_LIMIT:
                ours += f" {noise_gap:.2g} nats/token above the tuned loss, not at it"
        lines.append(f"  {name}: {ours} ({paper}: {where})")
    return "\n".join(lines)


def preset_regime(
    preset: Preset, vocab_size: int, noise_scale: tuple[float, float] | None = None
) -> dict[str, tuple[float, float]]:
    """Where `preset` sits against the paper's ratios (PAPER_REGIME), as (min, max) over
    its batch sizes and models: a batch's tokens as a fraction of the pool's training tokens,
    the pool's training tokens per model parameter (untied, at `vocab_size`), epochs, and a
    batch's tokens over the gradient noise scale, from `noise_scale`: the (lowest, highest)
    B_simple in tokens that notebook 05 measured over pools (NaN when not measured)."""

    params = {row["name"]: row["params"] for row in param_count_table(vocab_size)}
    batch = [b * preset.grid.seq_len / preset.pools.recipe.tokens for b in preset.grid.batch_sizes]
    per_param = [preset.pools.recipe.tokens / params[m] for m in preset.grid.models]
    lowest, highest = noise_scale or (math.nan, math.nan)
    tokens = (
        min(preset.grid.batch_sizes) * preset.grid.seq_len,
        max(preset.grid.batch_sizes) * preset.grid.seq_len,
    )
    return {
        "batch / pool (tokens)": (min(batch), max(batch)),
        "pool tokens per parameter": (min(per_param), max(per_param)),
        "epochs": (float(min(preset.grid.epochs)), float(max(preset.grid.epochs))),
        NOISE_RATIO: (tokens[0] / highest, tokens[1] / lowest),
    }


def deviations(preset: Preset) -> list[str]:
    """How `preset`'s study differs from Kim et al.'s (docs/REFERENCE_RECIPE.md). Shared
    with it: AdamW (0.9, 0.95), eps 1e-8, clipping at 1.0, cosine to 0 after 1% warmup,
    Levanter's decay mask, untied embeddings, rope theta 10,000."""
    notes = []
    others = [m for m in preset.grid.models if m not in ("150m", "300m", "600m", "1.4b", "1.5b")]
    if others:
        notes.append(f"models {', '.join(others)}: not in the reference ladder (150m-1.5b)")
    if preset.grid.seq_len != 4096:
        notes.append(f"seq_len {preset.grid.seq_len} (reference 4,096)")
    if not preset.pools.recipe.source.startswith("hf:mlfoundations/dclm"):
        notes.append(
            f"pool: {preset.pools.recipe.source}, {preset.pools.recipe.tokens:,} tokens "
            "(reference: DCLM-Baseline, 200M tokens)"
        )
    budgets = ", ".join(map(str, preset.grid.epochs))
    if preset.grid.wsd_branches:
        notes.append(
            f"epoch budgets {budgets} as WSD cool-downs (the last 20% of each budget's steps, "
            f"linear to 0, warmup 1% of {max(preset.grid.epochs)} epochs) branched from one run "
            "(reference: a cosine run per budget, 1 to 64 epochs)"
        )
    else:
        notes.append(f"epoch budgets {budgets}, each its own run (reference grid: 1 to 64 epochs)")
    if preset.grid.run_fields.get("device") != "cuda":
        notes.append("float32 on CPU (reference: bfloat16 compute)")
    if preset.grid.beta2_half_life_batch:
        notes.append(
            f"AdamW beta2 scaled with the batch to the token half-life of {preset.base_beta2()} "
            f"at batch {preset.grid.beta2_half_life_batch} (reference: 0.95 at every batch)"
        )
    return notes
