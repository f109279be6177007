"""Notebook 02's AdamW beta2 ablation: is the smallest batch's deficit the optimizer's?

Kim et al. keep AdamW's betas at (0.9, 0.95) at every batch. The second-moment average then has
a half-life of ln 0.5 / ln beta2 optimizer steps, so at a small batch it spans few tokens. Marek et
al. 2025 (arXiv 2507.07101) keep that half-life constant in tokens instead: the *half-life rule*,
beta2' = beta2 ** (B' / B) at batch B' for beta2 at batch B (Preset.beta2_half_life_batch). The
ablation runs the preset's smallest batches with the other setting than the batch sweep's
(grids.beta2_ablation); the sweep's own setting there is the sweep's runs. Every loss compared is a
held-out tuned endpoint (repro.analysis.selection: lr, weight decay and epoch budget, and where an
arm spans several batches the batch, chosen on the other replicates and the other half of the
validation documents); differences are in nats/token with intervals over replicates (pools) and
documents (repro.analysis.intervals), each replicate's value shown.
"""

from __future__ import annotations

import pandas as pd

from repro.analysis.analyses import LITTLE, arm, signature
from repro.analysis.intervals import Claim, Difference, claim_table, describe, lower_verdict
from repro.analysis.results import Results
from repro.analysis.selection import compare
from repro.design.grids import beta2_ablation, beta2_ablation_batches, beta2_at, beta2_setting
from repro.design.presets import Preset
from repro.runtime.schedules import beta2_half_life_tokens

MAREK = "not tested (betas fixed); Marek et al. 2025: yes"


def beta2_reason(preset: Preset) -> str:
    """Which AdamW betas the batch sweep uses and why, and what the ablation runs instead."""
    if preset.grid.beta2_half_life_batch:
        anchor_batch = preset.grid.beta2_half_life_batch
        why = (
            f"the preset sets grid.beta2_half_life_batch {anchor_batch}, so that every batch keeps "
            "the token half-life its beta2 has there (Marek et al. 2025)"
        )
        if anchor_batch == max(preset.grid.batch_sizes):
            why += (
                "; that is the largest batch of the grid, so no batch runs a lower beta2 than the "
                "reference recipe's and only the smaller batches average over more steps"
            )
        anchor = ""
    else:
        why = "Kim et al.'s recipe, which the preset keeps (grid.beta2_half_life_batch 0)"
        anchor = f"\n  from schedules.batch {preset.schedules.batch}, the preset's reference batch"
    batches = ", ".join(map(str, beta2_ablation_batches(preset)))
    return (
        f"batch sweep: {beta2_setting(preset)}\n  why: {why}\n"
        f"ablation at batches {batches} (sequences), first model {preset.grid.models[0]}: "
        f"{beta2_setting(beta2_ablation(preset))}{anchor}"
    )


def beta2_settings(preset: Preset) -> pd.DataFrame:
    """Per batch size (sequences): the batch sweep's beta2 and the half-life of its second-moment
    average in tokens, and the ablation's at its batches (empty elsewhere)."""
    other = beta2_ablation(preset)
    rows = []
    for batch in preset.grid.batch_sizes:
        tokens = batch * preset.grid.seq_len
        row = {"batch (sequences)": batch, "sweep beta2": beta2_at(preset, batch)}
        row["sweep half-life (tokens)"] = round(beta2_half_life_tokens(row["sweep beta2"], tokens))
        if batch in beta2_ablation_batches(preset):
            row["ablation beta2"] = beta2_at(other, batch)
            half_life = beta2_half_life_tokens(row["ablation beta2"], tokens)
            row["ablation half-life (tokens)"] = round(half_life)
        rows.append(row)
    table = pd.DataFrame(rows)
    return table.astype({c: "Int64" for c in table if c.endswith("(tokens)")})


def beta2_arms(
    sweep: pd.DataFrame, ablation: pd.DataFrame, preset: Preset
) -> dict[str, pd.DataFrame]:
    """{setting in words: endpoints} for the figure: the batch sweep's endpoints (rows of
    analyses.batch_endpoints) at the ablation's model, and the ablation's."""
    model = preset.grid.models[0]
    return {
        f"{beta2_setting(preset)} (sweep)": sweep[sweep["model"] == model],
        f"{beta2_setting(beta2_ablation(preset))} (ablation)": ablation,
    }


def deficit_verdict(deficit: Difference) -> str:
    """The claim that a batch's deficit is gone: "agrees" when the whole interval of `deficit`
    (the batch minus the best other, nats/token) lies below +LITTLE (gone, or reversed),
    "disagrees" when it lies above +LITTLE (a deficit remains), else "undetermined"; never
    definite on fewer than MIN_REPLICATES replicates, and a censored arm is never the one found
    worse (intervals.lower_verdict of the deficit minus LITTLE)."""
    shifted = deficit._replace(
        value=deficit.value - LITTLE, low=deficit.low - LITTLE, high=deficit.high - LITTLE
    )
    return lower_verdict([shifted])


def _at(results: Results, batch: int, cap: float | None) -> pd.DataFrame:
    """Held-out endpoints per replicate of `results`' runs at one batch size (epoch `cap`)."""
    return arm(results, results.runs["batch_size"] == batch, (), cap)


def beta2_claims(
    sweep: Results, ablation: Results, model: str, sweep_uses_rule: bool, *, cap: float | None
) -> pd.DataFrame:
    """Claims of the beta2 ablation at `model` (the ablation's): `sweep` is the batch sweep's
    results (every batch), `ablation` the ablation's (its batches, the other beta2 setting),
    `sweep_uses_rule` whether the sweep scales beta2 (Preset.beta2_half_life_batch > 0), `cap`
    the study's epoch cap (Grid.cap).

    - per ablated batch B, "the half-life rule lowers the tuned val loss": rule minus reference
      at B (lower_verdict, 90%);
    - "the smallest batch's deficit is the optimizer's": with the rule, the smallest ablated
      batch S minus the best of the sweep's other batches (batch tuned among them, the sweep's
      betas) at 90% (deficit_verdict: agrees below +LITTLE, disagrees above); the reference
      betas' S minus the same arm is shown beside it;
    - "with the rule, S overfits": the same two arms' val and final train losses
      (analyses.signature_verdict, 95% each)."""
    sweep = sweep.subset(sweep.runs["model"] == model)
    batches = sorted(ablation.runs["batch_size"].unique().tolist())
    rule, reference = (sweep, ablation) if sweep_uses_rule else (ablation, sweep)
    claims = []
    for batch in batches:
        diff = compare(_at(rule, batch, cap), _at(reference, batch, cap))
        claim = f"the half-life rule lowers the tuned val loss at batch {batch}"
        measured, verdict = describe("rule - reference", diff), lower_verdict([diff])
        claims.append(Claim(f"rule-lowers/{batch}", claim, MAREK, measured, verdict, diff))
    smallest = batches[0]
    best = arm(sweep, sweep.runs["batch_size"] != smallest, cap=cap)
    deficit = compare(_at(rule, smallest, cap), best)
    before = compare(_at(reference, smallest, cap), best)
    name = f"batch {smallest} - best other (the sweep's betas)"
    claims.append(
        Claim(
            "deficit-is-optimizer",
            f"batch {smallest}'s deficit is the optimizer's: with the half-life rule it is at most "
            f"{LITTLE} nats/token",
            "no (read as over-fitting); Marek et al. 2025: yes",
            f"{describe(f'rule: {name}', deficit)}; {describe('reference betas', before)}",
            deficit_verdict(deficit),
            deficit,
            LITTLE,
        )
    )
    overfits = f"with the half-life rule, batch {smallest} overfits: lower train, worse val loss"
    paper = "yes (at fixed betas)"
    signed = signature(_at(rule, smallest, cap), best, name)
    claims.append(Claim("rule-smallest-overfits", overfits, paper, *signed))
    return claim_table(claims)
