# %% [markdown]
# # 06 — The value of a repeated token, by batch size and recipe
#
# **What this run found** (each claim's verdict, effect and interval, the paper's claim beside
# it) is the table under the first code cell, filled in from this run's claim tables when the
# notebook reaches them; below, the question states what the papers claim.
#
# **Question.** How fast does a repeated token lose its value, and does the batch size (or the
# recipe) change it? Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models") count D
# tokens drawn from U unique ones as D' = U + U·R_D*·(1 − exp(−R_D/R_D*)) fresh tokens, R_D =
# D/U − 1 the repetitions after the first epoch, and fit R_D* ≈ 15.4: about 4 epochs are nearly
# as good as fresh data, and further repetitions are worth less and less. The seed paper's thesis,
# that small batches regularise multi-epoch training, predicts that a smaller batch keeps repeated
# tokens valuable for longer (a larger R_D*). And do ensembles beat a single model on the same
# pool? Kim et al. 2025 ("Pre-training under infinite compute") find that an ensemble of
# independently trained models reaches a lower loss than the single model; if ensembling
# regularises as small batches do, its gain should be larger where the single model over-fits
# more.
#
# **Method.** (1) The fresh-data curve: one epoch on fresh pools of several multiples of the
# pool's U training tokens (`repetition.fresh_multiples`; each pool seed draws its own, sharing its
# tokenizer and the validation documents), every batch the pool holds, lr tuned at the first
# weight decay, the tuned loss held out (`analyses.batch_endpoints`); L(D) = E + B·(D/U)^−β fitted
# per pool and batch (`repetition.fit_fresh`). E holds the model's term: one model size, so the
# model term is a constant here, and only Muennighoff's data terms are fitted. (2) R_D*: per pool
# and batch, least squares over a log grid of the tuned loss at each epoch budget of notebook 02's
# sweep (lr and weight decay tuned within the budget, held out; then the best over the budgets up
# to it) against L(D') (`repetition.fit_r_star`); the same for the recipe arms of notebook 03,
# each against its batch's fresh curve. R_D* is in repetitions (epochs after the first); an
# interval is a 90% t interval of log10 R_D* over the pools (the selection pools: 3 at cpu). (3)
# Ensembles: the configuration each batch chose on the selection pools (02's choice,
# `confirmation.pooled_choice`) trained with `repetition.ensemble_members` seeds (initialisation
# and data order) on the first `repetition.ensemble_pools` confirmation pools, each member keeping
# its validation tokens' losses; an ensemble of K predicts the mean of its members' distributions,
# so its loss is the mean over tokens of −log(mean_k p_k) (`ensembles.ensemble_loss`), averaged
# over every K-member subset. Intervals are 90% t intervals over the confirmation pools.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # `repro preset list`, or FILE.yaml
workers = None  # parallel runs; default: the preset's
train = os.environ.get("REPRO_TRAIN", "0") in ("1", "true")  # else read results/<preset>.tar.xz
dry_run = False  # the built-in preset shrunk to CPU size (`repro reproduce --dry-run`)

# %%
import pandas as pd
from IPython.display import Markdown, display

from repro.analysis import analyses, ensembles, figures_repetition, repetition
from repro.analysis.findings import Findings
from repro.analysis.intervals import claim_count, claim_summary, claim_table
from repro.study import notebook_study

study = notebook_study(globals())  # checks the parameters above, prints what the study trains
findings = Findings(study.preset.name)  # this run's verdicts, filled in at the end
P = study.preset

# %% [markdown]
# ## Fresh data: one epoch on pools of several sizes
#
# The tuned one-epoch loss per pool, batch and pool size (in units of the pool's U tokens), then
# each pool and batch's fitted fresh-data curve. A batch with fewer than 3 pool sizes (a small pool
# holds no batch of it) has no curve.

# %%
model = P.grid.models[0]
pools = study.pools()
fresh_pools = study.fresh_pools()
fresh_runs = dict(zip(fresh_pools, study.sweeps(study.fresh_grids())))
fresh = repetition.fresh_points(fresh_runs, fresh_pools, pools)
print(f"model {model}; fresh pools of {sorted(fresh_pools)} x {P.pools.recipe.tokens:,} tokens")
fresh.pivot_table("val_loss", ["batch_size", "multiple"], "pool").rename(
    columns=lambda p: p.rsplit("-", 1)[-1]
).round(4)

# %% [markdown]
# ## Repeated data: R_D* per batch size
#
# Per pool and batch: the fresh curve, and R_D* fitted to the best tuned loss up to each epoch
# budget of notebook 02's sweep ("bound": inside the grid, or at its top: no decay measured, a
# lower bound; or its bottom). E, B and β are the fresh curve's (nats/token; D in units of U);
# "fresh_rms" and "rms" are the two fits' root-mean-square misses (nats/token). Two columns say
# how far to trust a value: "D'/U at the largest budget", the fresh tokens the fit credits to the
# whole budget, is "extrapolated" where it lies beyond the largest fresh pool measured; and "steps
# at the largest budget": a batch that takes few optimizer steps in all is limited by its steps,
# not its data, so its repeated tokens keep their value for that reason, whatever the batch does
# to over-fitting (at cpu, batch 32 takes 128 steps in 32 epochs, and only batch 1 lies inside the
# paper's batch / pool range: README, the regime).

# %%
sweep = study.sweep(study.batch_sweep_grid())
sweep = sweep.subset(sweep.runs["model"] == model)
budgets = repetition.budget_points(sweep, P.grid.cap)
fits = repetition.r_star_table(fresh, budgets, "batch_size")
by_batch = repetition.r_star_summary(fits, "batch_size")
study.save_table(by_batch.round(4), "06_r_star_by_batch")
display(analyses.pool_names(fits).round(4))
by_batch.round(3)

# %%
r_claim = repetition.r_star_claim(fits)
study.save(
    figures_repetition.loss_vs_epochs(budgets, fits, r_claim.headline),
    "06_loss_vs_epochs",
)
study.save(
    figures_repetition.r_star_vs_group(
        by_batch,
        "batch_size",
        "batch size (sequences)",
        repetition.spread_title(by_batch, "batch_size", "batch"),
    ),
    "06_r_star_vs_batch",
)

# %% [markdown]
# ## Recipes: R_D* per arm of notebook 03
#
# Notebook 03's arms at their batch (epoch orderings; tying x embedding weight decay), each fitted
# against the fresh curve of its batch (the original recipe's: one epoch of fresh data has no
# repetition for an ordering to change).

# %%
loaders = study.sweep(study.loader_grid())
ends = analyses.batch_endpoints(sweep, cap=P.grid.cap)
tying = study.sweep(study.embedding_grid(P.ablations.tying_batch_size or analyses.best_batch(ends)))
arm_budgets = pd.concat(
    [
        repetition.budget_points(loaders, P.grid.cap, ("loader",)),
        repetition.budget_points(tying, P.grid.cap, ("tie_embeddings", "embedding_weight_decay")),
    ]
)
arm_fits = repetition.r_star_table(fresh, arm_budgets, "arm")
by_arm = repetition.r_star_summary(arm_fits, "arm")
study.save_table(by_arm.round(4), "06_r_star_by_arm")
study.save(
    figures_repetition.r_star_vs_group(
        by_arm, "arm", "recipe arm", repetition.spread_title(by_arm, "arm", "arm")
    ),
    "06_r_star_vs_arm",
)
by_arm.round(3)

# %% [markdown]
# ## Ensembles of seeds at the smallest, the largest and the best batch
#
# Each member is the configuration its batch chose on the selection pools, with its own seed; each
# confirmation pool is a replicate. K = 1 is the mean single model; "gain" is the single model's
# loss minus the ensemble's (nats/token), with its interval over pools. The preset has one model
# size at cpu: the comparison with the next model size is left to presets with several.

# %%
ensemble_claims = []
if P.repetition.ensemble_pools:
    member_grids = study.ensemble_grids(sweep)
    member_runs = study.trained(list(member_grids.values()), "ensemble members")
    members = ensembles.member_rows(dict(zip(member_grids, member_runs)))
    table = ensembles.ensemble_table(members, study.token_losses)
    summary = ensembles.ensemble_summary(table)
    study.save_table(summary.round(4), "06_ensembles")
    order = ensembles.overfitting_order(ends, ensembles.ensemble_batches(sweep))
    ensemble_claims = ensembles.ensemble_claims(table, members, order)
    study.save(
        figures_repetition.ensemble_curves(summary, ensemble_claims[0].headline), "06_ensembles"
    )
    print(f"over-fits more (selection pools): {order[0]}; gap difference {order[2].value:+.3f}")
    display(summary.round(4))
else:
    print(f"preset {P.name} trains no ensembles (repetition.ensemble_pools is 0)")

# %% [markdown]
# ## Claims vs measurement
#
# - R_D* vs batch: log10 R_D* at the smallest minus at the largest batch whose R_D* is measured
#   (none of its pools at a bound of the grid or resting on the fresh curve extrapolated:
#   `repetition.identified`; the others are named), paired by pool, 90% t interval over the pools
#   widened for their held-out choices; agrees when it lies above 0, disagrees when below.
# - Ensemble beats the single model: the largest ensemble minus the best of its members on each
#   confirmation pool (that member picked on the pool's own documents, the single model at its
#   most favoured: against the mean member an ensemble wins by Jensen's inequality alone), at the
#   best batch; agrees when the interval lies below 0, disagrees when above.
# - Gain vs over-fitting: which of the smallest and the largest batch over-fits more (validation
#   minus training loss) is decided on the selection pools, from notebook 02's held-out endpoints
#   (`ensembles.overfitting_order`), not on the ensembles' pools; its ensemble gain minus the
#   other's, paired by confirmation pool; agrees when the interval lies above 0, disagrees when
#   below, undetermined when the order itself is not decided.

# %%
claims = claim_table([r_claim, *ensemble_claims])
saved = study.save_claims(claims, "06_claims")
print(claim_count(claims))
Markdown(saved.read_text())  # the claims in full, as committed in figures/<preset>/06_claims.md

# %% [markdown]
# ## Summary
#
# Generated from this notebook's claim table (`intervals.claim_summary`): a sentence per claim.

# %%
findings.report([claims])  # fills in the table under the first code cell
Markdown(claim_summary(P.name, [claims]))
