# %% [markdown]
# # 02 — Batch size with per-batch tuned learning rate, weight decay and epoch count
#
# **What this run found** (each claim's verdict, effect and interval, the paper's claim beside
# it) is the table under the first code cell, filled in from this run's claim tables when the
# notebook reaches them; below, the question states what the papers claim.
#
# **Question.** When the data are repeated for many epochs, which batch size gives the lowest
# validation loss? The study finds a U-shape: smaller batches than usual win (gradient noise
# regularises), but the smallest batch overfits (lower training loss, worse validation loss).
#
# **Method.** For every model size and batch size (in sequences of `seq_len` tokens) we sweep the
# learning rate (a grid that moves with a power of the batch, the preset's: `repro preset show`),
# the weight decay and the epoch budget. As in Kim et al., each epoch budget is its own run whose
# cosine schedule ends at that budget (a preset may instead branch each budget's WSD cool-down from
# one run, and says so below), and each run is judged at its end. The *tuned endpoint* of a batch
# size is chosen without a selection bonus (`repro.analysis.selection`): on each replicate (an
# independently sampled pool), the (lr, weight decay, budget) best on the *other* replicates' half
# of the validation documents is scored on this replicate's other half, and the two halves together
# give the reported loss. Every comparison below is a difference averaged over replicates with a 90%
# t interval that holds both the spread between replicates and between documents
# (`repro.analysis.intervals`); a verdict "agrees" only when the interval supports the claim, and
# needs at least 3 replicates. The best evaluation *inside* the chosen run (within-run early
# stopping) is shown separately. The recipe is the one-pass recipe of Kim et al.
# (docs/REFERENCE_RECIPE.md): sequences packed once and reshuffled each epoch (SHUFFLE), untied
# embeddings, weight decay on every linear layer (the output head included) but not on the token
# embedding, AdamW (0.9, 0.95), cosine to zero after 1% warmup. The summary below lists where this
# preset departs from that recipe.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # `repro preset list`, or FILE.yaml
workers = None  # parallel runs; default: the preset's
train = os.environ.get("REPRO_TRAIN", "0") in ("1", "true")  # else read results/<preset>.tar.xz
dry_run = False  # the built-in preset shrunk to CPU size (`repro reproduce --dry-run`)

# %%
from IPython.display import Markdown

from repro.analysis import accuracy, analyses, figures_batch, optimizer_claims
from repro.analysis.findings import Findings
from repro.analysis.intervals import claim_count, claim_summary
from repro.analysis.pools import bayes_floor, pool_vocab_size
from repro.design.grids import usual_batch_source
from repro.runtime.shapes import by_size
from repro.study import notebook_study

study = notebook_study(globals())  # checks the parameters above, prints what the study trains
findings = Findings(study.preset.name)  # this run's verdicts, filled in at the end
P = study.preset

# %%
pools = study.pools()
# model x batch x lr x wd x budget, per pool; the beta2 ablation (below) trains in the same sweep
grids = [study.batch_sweep_grid(), study.beta2_ablation_grid()]
results, beta2_results = study.sweeps(grids)
runs, evals = results.runs, results.evals
counts = {f: runs[f].nunique() for f in ("pool", "model", "batch_size", "epochs")}
print(f"{len(runs)} runs over {counts}: {runs['status'].value_counts().to_dict()}")

# %% [markdown]
# ## Tuned endpoints
#
# One row per pool × model × batch size: the (lr, weight decay, epoch budget) chosen on all
# validation documents, the cross-fitted loss `val_loss`, the final training loss of the chosen run
# (mean over the steps since the previous evaluation), and within that run the epoch of its best
# evaluation. `at_largest_budget`: the chosen budget is the largest tried, so the best budget may
# lie beyond; `at_cap`: the chosen budget is the study's cap (`P.grid.cap` epochs: the paper's 32 at
# the CPU presets), the largest it allows, so nothing beyond counts for its claims. Where the preset
# grows its grids (`growth.rounds`, repro.analysis.growth), a group whose lr or weight decay was
# chosen on the edge of what it tried got a run beyond it, round after round; a line names every
# group whose choice still sits on an edge.

# %%
endpoints = analyses.pool_names(analyses.batch_endpoints(results, cap=P.grid.cap))
for _, row in endpoints[endpoints["edge"] != ""].iterrows():
    print(f"grid edge: {row['pool']}, {row['model']}, batch {row['batch_size']}: {row['edge']}")
columns = ["pool", "model", "batch_size", "lr", "weight_decay", "epochs", "at_largest_budget"]
endpoints[[*columns, "at_cap", "val_loss", "train_loss", "early_stop_epoch"]]

# %% [markdown]
# ## Tuned validation loss vs batch size
#
# One curve per model size. Left: the tuned validation loss, mean over pools with its 90% interval
# over validation documents; the dotted line is the validation split's Bayes floor, where the
# source knows it. Right: the training loss at the end of the same runs. A batch whose training
# loss is lower while its validation loss is higher shows the over-fitting signature the paper
# reads.

# %%
fig = figures_batch.best_loss_vs_batch(endpoints, P.grid.batch_sizes, bayes_floor(pools[0]))
study.save(fig, "02_best_loss_vs_batch")
analyses.across_replicates(endpoints).round(4)

# %% [markdown]
# The same sweep as the claims test it: each batch size minus its model size's tuned optimum (the
# batch chosen among all, per pool on the selection half of the documents), paired over pools and
# documents, with 90% intervals. Above 0: worse than the optimum by that much.

# %%
differences = analyses.batch_differences(results, list(P.grid.models))
study.save(figures_batch.batch_differences(differences, P.grid.batch_sizes), "02_batch_differences")
differences.round(4)

# %% [markdown]
# ## Tuned loss per epoch budget
#
# lr and weight decay tuned within each budget (mean over pools). Where the largest budget is
# still the best, the chosen budget is censored (more epochs might still help), unless it is the
# study's cap.

# %%
budgets = analyses.loss_per_budget(results)
study.save_table(budgets.round(3).reset_index(), "02_loss_per_budget")
budgets.round(3)

# %% [markdown]
# ## The tuned optimum per model size
#
# In the form of Kim et al.'s table: the batch with the lowest loss over replicates, its lr, weight
# decay and epoch budget on each replicate, and its loss with the 90% interval over replicates and
# validation documents (the batch is chosen on the same data: a level, not a verdict).

# %%
vocab = pool_vocab_size(pools[0])
models = by_size(P.grid.models, largest_first=True)
optimum = analyses.optimum_table(endpoints, models)
study.save_table(optimum, "02_optimum_per_size")
optimum

# %% [markdown]
# ## The optimal batch vs model size
#
# The batch with the lowest replicate-mean tuned loss at each model size (line), each pool's optimum
# (crosses), and the batches whose 90% interval overlaps the optimum's: the range the data cannot
# tell apart from it.
# %%
optimal = analyses.optimal_batches(endpoints, models, vocab)
study.save(figures_batch.optimal_batch_vs_size(optimal), "02_optimal_batch_vs_size")
optimal
# %% [markdown]
# ## Training and validation curves
#
# The tuned run at the smallest, an intermediate and the largest batch (pool 0, the largest model).
# Does the smallest batch reach a lower training loss but a worse validation loss?

# %%
model = models[0]
pool0 = endpoints[
    (endpoints["pool"] == endpoints["pool"].iloc[0]) & (endpoints["model"] == model)
].sort_values("batch_size")
picks = pool0.iloc[sorted({0, len(pool0) // 2, len(pool0) - 1})]
study.save(
    figures_batch.curves(evals, picks, f"Tuned runs, {model}, {pool0['pool'].iloc[0]}"), "02_curves"
)

# %% [markdown]
# ## Downstream accuracy
#
# Where the preset names downstream tasks (`P.grid.downstream_tasks`), each tuned endpoint above is
# scored with lm-evaluation-harness (`repro eval`, through `study.downstream`): accuracy per batch
# size with a 90% interval from the standard errors over examples, to read beside the validation
# loss. The paper finds downstream trends broadly follow the loss, with more noise.

# %%
tasks = list(P.grid.downstream_tasks)
scored = study.downstream(endpoints) if tasks else None
if tasks:
    study.save(
        figures_batch.accuracy_vs_batch(scored, tasks, P.grid.batch_sizes), "02_accuracy_vs_batch"
    )
print(f"downstream tasks: {', '.join(tasks) or 'none in this preset'}")

# %% [markdown]
# ## The small-batch end: AdamW beta2
#
# AdamW's second-moment average has a half-life of ln 0.5 / ln beta2 optimizer steps, so with the
# same beta2 at every batch a small batch averages over few tokens. Marek et al. 2025 (arXiv
# 2507.07101) keep the half-life constant in tokens instead (the *half-life rule*: beta2 ** (B' / B)
# at batch B' for beta2 at batch B). Here the preset's smallest batches run again with the *other*
# setting than the sweep above, at the first model with the same recipe, tuned like the sweep (lr x
# weight decay x epoch budget, the preset's grid growth, held-out choices); the sweep's own setting
# at those batches is the sweep's runs. Which betas the sweep uses and why, and each batch's beta2
# with its half-life in tokens (batch x `seq_len` tokens per step):

# %%
print(optimizer_claims.beta2_reason(P))
optimizer_claims.beta2_settings(P)

# %% [markdown]
# Tuned validation loss per batch under each setting: mean over pools with its 90% interval over
# pools and validation documents; the ablation's batches as points.

# %%
ablated = analyses.pool_names(analyses.batch_endpoints(beta2_results, cap=P.grid.cap))
arms = optimizer_claims.beta2_arms(endpoints, ablated, P)
study.save(figures_batch.beta2_vs_batch(arms, P.grid.batch_sizes), "02_beta2_vs_batch")
analyses.across_replicates(ablated).round(4)

# %% [markdown]
# The claims, each a difference in nats/token with its interval over pools (the replicates) and
# validation documents, then each pool's value; a verdict needs 3 pools.
#
# - *The half-life rule lowers the tuned val loss at batch B*, per ablated batch: rule minus
#   reference at B; agrees when the 90% interval lies below 0, disagrees when above.
# - *Batch S's deficit is the optimizer's* (S the smallest ablated batch): with the rule, S's loss
#   minus that of the best of the sweep's other batches (the batch chosen held-out among them,
#   with the sweep's betas). Agrees when the whole 90% interval lies below +`analyses.LITTLE`
#   (0.01 nats/token: the deficit is gone, or reversed), disagrees when it lies above it (a
#   deficit remains); the reference betas' S minus the same arm is shown beside it.
# - *With the rule, S overfits*: the same two arms, the paper's signature (a worse validation loss
#   with a lower final training loss agrees; a better validation loss, or a worse one with a
#   higher training loss, disagrees; 95% intervals).
#
# An arm whose chosen budget is the largest tried but below the study's cap (`P.grid.cap` epochs),
# or whose lr or weight decay is not bracketed, is censored (its loss might still fall) and is
# never the arm a verdict finds worse; an arm whose chosen budget is the cap is "at cap": the
# verdict holds within the budgets the study allows, as the paper states its claims.

# %%
rule = P.grid.beta2_half_life_batch > 0
beta2_claims = study.confirmed(
    lambda sweep, ablation: optimizer_claims.beta2_claims(
        sweep, ablation, P.grid.models[0], rule, cap=P.grid.cap
    ),
    results,
    beta2_results,
)
beta2_table = study.save_claims(beta2_claims, "02_beta2_claims")
print(claim_count(beta2_claims))
Markdown(beta2_table.read_text())  # as committed in figures/<preset>/02_beta2_claims.md

# %% [markdown]
# ## Claims vs measurement
#
# At each model size, largest first. "The usual batch" is the one-pass batch of this preset
# (`usual_batch_source(P)`). In each comparison the arm that spans several batch sizes (the
# interior batches; those below the usual batch; all but the smallest) has its batch size chosen
# on the selection half too.
#
# Differences are in nats/token with 90% intervals over replicates and validation documents (95%
# where a claim can disagree in two ways), then the difference on each replicate; "censored" names
# an arm whose best epoch budget is the largest tried but below the study's cap, or whose lr or
# weight decay is not bracketed (its loss might still fall), which cannot be the arm a verdict
# finds worse; "at cap" an arm whose best budget is the cap (the verdict holds within it). A claim
# on fewer than 3 replicates is undetermined. Beside each row: n, the replicates its interval is
# over, `mde`, the smallest effect (nats/token) that spread decides at 80% power, and where it is
# undetermined roughly how many pools the observed effect would need (`intervals.Claim.numbers`;
# the saved CSV also has the effect and its interval as numbers).
#
# **Confirmation.** Where the preset has confirmation pools (`P.pools.confirmation_seeds`), the
# pools above only choose: each arm's configuration is the one with the lowest mean final
# validation loss over them (`confirmation.pooled_choice`), and it is trained again, one run per
# confirmation pool, every arm with the same seed on the same pools; each confirmation pool draws
# its own training and validation documents. A difference is then measured on the confirmation
# pools alone, with a t interval over them, and the values listed per replicate are per
# confirmation pool (`repro.analysis.confirmation`). Censored and at cap still describe the
# arm's choice on the selection pools.

# %%
usual = analyses.usual_batch(results, P)
claims = study.confirmed(
    lambda sweep: analyses.batch_sweep_claims(
        sweep, models, usual, usual_batch_source(P), cap=P.grid.cap
    ),
    results,
)
claims = accuracy.with_accuracy_claims(claims, scored, tasks, models[0], "batch_size")
table = study.save_claims(claims, "02_claims")
print(claim_count(claims))
Markdown(table.read_text())  # the claims in full, as committed in figures/<preset>/02_claims.md

# %% [markdown]
# ## Summary
#
# Generated from this notebook's claim tables (`intervals.claim_summary`): a sentence per claim.

# %%
findings.report([beta2_claims, claims])  # fills in the table under the first code cell
Markdown(claim_summary(P.name, [beta2_claims, claims]))
