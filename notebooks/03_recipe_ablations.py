# %% [markdown]
# # 03 — Recipe ablations for repeated data
#
# **What this run found** (each claim's verdict, effect and interval, the paper's claim beside
# it) is the table under the first code cell, filled in from this run's claim tables when the
# notebook reaches them; below, the question states what the papers claim.
#
# **Question.** Recipes tuned for one pass should change when data repeat. The study finds: REPACK
# (shuffle documents and pack new sequences every epoch) beats SHUFFLE (re-batch the same sequences)
# beats REPEAT (same sequences, same batches); positive weight decay on the embeddings helps, tying
# alone does little, both together are best; and the best stopping point moves later.
#
# **Method.** Every arm of every ablation is tuned over the same grid as notebook 02 (lr, weight
# decay and epoch budget, each budget its own run), with each replicate's choice made on the other
# replicates' half of the validation documents and scored on its own other half
# (`repro.analysis.selection`), so no arm inherits another's selection; identical configurations are
# trained once. All ablations use the preset's first model size (printed below), on every pool.
# Epoch orderings: at the preset's ablation batch sizes. Tying × embedding decay: four arms (untied
# / tied × no / positive embedding decay, the positive decays tuned inside the arm) at the preset's
# tying batch and loader (`ablations.tying_batch_size`, `tying_loader`; batch 0: the one notebook 02
# found best). Combined recipe vs the original: at the ablation batch sizes, the batch size tuned
# inside each recipe over those sizes. Each claim is a difference averaged over replicates with its
# 90% interval over replicates and validation documents.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # `repro preset list`, or FILE.yaml
workers = None  # parallel runs; default: the preset's
train = os.environ.get("REPRO_TRAIN", "0") in ("1", "true")  # else read results/<preset>.tar.xz
dry_run = False  # the built-in preset shrunk to CPU size (`repro reproduce --dry-run`)

# %%
from IPython.display import Markdown

from repro.analysis import accuracy, analyses, figures_recipe
from repro.analysis.findings import Findings
from repro.analysis.intervals import claim_count, claim_summary
from repro.study import notebook_study

study = notebook_study(globals())  # checks the parameters above, prints what the study trains
findings = Findings(study.preset.name)  # this run's verdicts, filled in at the end
P = study.preset
model = P.grid.models[0]
print(f"ablations at model {model}")

# %% [markdown]
# The original recipe's tuned endpoints at this model (notebook 02's runs):

# %%
pools = study.pools()
results02 = study.sweep(study.batch_sweep_grid())
original = results02.subset(results02.runs["model"] == model)
original_ends = analyses.batch_endpoints(original, cap=P.grid.cap)
b_best = analyses.best_batch(original_ends)
analyses.pool_names(original_ends)[
    ["pool", "batch_size", "lr", "weight_decay", "epochs", "val_loss"]
]

# %% [markdown]
# ## Epoch orderings: REPEAT vs SHUFFLE vs REPACK
#
# At the preset's ablation batch sizes, on every pool.

# %%
loader = study.sweep(study.loader_grid())
loader_ends = analyses.batch_endpoints(loader, ["loader"], cap=P.grid.cap)
study.save(figures_recipe.loaders(loader_ends), "03_loaders")
budget = ["epochs", "at_largest_budget", "at_cap"]
loader_ends[["batch_size", "loader", "lr", "weight_decay", *budget, "val_loss"]]

# %% [markdown]
# ## Weight tying × embedding weight decay
#
# At the preset's tying batch, or where it names none, the batch size that notebook 02 found best
# (mean over pools); with the preset's tying loader.

# %%
b_tying = P.ablations.tying_batch_size or b_best
print(f"tying x embedding decay at batch {b_tying}, loader {P.ablations.tying_loader}")
embedding_fields = ["tie_embeddings", "embedding_weight_decay"]
embedding = study.sweep(study.embedding_grid(b_tying))
embedding_ends = analyses.batch_endpoints(embedding, embedding_fields, cap=P.grid.cap)
study.save(
    figures_recipe.tying_embedding_decay(embedding_ends, b_tying), "03_tying_embedding_decay"
)
embedding_ends[[*embedding_fields, "lr", "weight_decay", *budget, "val_loss"]]

# %% [markdown]
# ## The combined recipe vs the original
#
# Combined: REPACK + tied embeddings + positive embedding decay (each positive value of the preset
# tuned like lr), at the ablation batch sizes on every pool; the original recipe's curve from
# notebook 02 spans every batch size, the claim compares it at the same batch sizes.

# %%
combined = study.sweep(study.combined_grid())
combined_ends = analyses.batch_endpoints(
    combined, also_tuned=("embedding_weight_decay",), cap=P.grid.cap
)
recipes = {
    "original (SHUFFLE, untied, no emb. decay)": original_ends,
    "combined (REPACK, tied, emb. decay)": combined_ends,
}
study.save(
    figures_recipe.combined_vs_original(recipes, P.grid.batch_sizes), "03_combined_vs_original"
)
analyses.across_replicates(original_ends, ["batch_size"]).merge(
    analyses.across_replicates(combined_ends, ["batch_size"]),
    on="batch_size",
    suffixes=(" original", " combined"),
).round(4)

# %% [markdown]
# ## Downstream accuracy of each ablation
#
# Where the preset names downstream tasks, every tuned endpoint of the ablations is scored
# (`study.downstream`): per arm, the mean validation loss and accuracy over its endpoints (pools,
# batch sizes) with the accuracy's standard error.

# %%
tasks = list(P.grid.downstream_tasks)
ablations = {"loader": loader_ends, "embedding": embedding_ends, "recipe": combined_ends}
scored = {name: study.downstream(ends) for name, ends in ablations.items()} if tasks else {}
arms = {"loader": ["loader"], "embedding": embedding_fields, "recipe": ["batch_size"]}
print(f"downstream tasks: {', '.join(tasks) or 'none in this preset'}")
accuracy.ablation_accuracy(scored, arms, tasks).round(3) if tasks else None

# %% [markdown]
# ## Claims vs measurement
#
# Differences are in nats/token with 90% intervals over replicates and validation documents, then
# the difference on each replicate; "censored" names an arm whose best epoch budget is the largest
# tried but below the study's cap (`P.grid.cap` epochs), or whose lr or weight decay is not
# bracketed (its loss might still fall), which cannot be the arm a verdict finds worse; "at cap"
# an arm whose best budget is the cap (the verdict holds within it). "The best stopping point
# moves later" is a difference-in-differences: how much the later half of the epoch budgets gains
# in the combined recipe minus how much it gains in the original. "Tying alone does little": the
# whole interval within +-`analyses.LITTLE` nats/token. Beside each row: n, `mde` (the smallest
# effect its spread decides at 80% power) and, where undetermined, roughly how many pools the
# observed effect would need (`intervals.Claim.numbers`).
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
claims = study.confirmed(
    lambda *arms: analyses.recipe_claims(*arms, cap=P.grid.cap),
    loader,
    embedding,
    original,
    combined,
)
claims = accuracy.with_accuracy_claims(claims, scored.get("loader"), tasks, model, "loader")
table = study.save_claims(claims, "03_claims")
print(claim_count(claims))
Markdown(table.read_text())  # the claims in full, as committed in figures/<preset>/03_claims.md

# %% [markdown]
# ## Summary
#
# Generated from this notebook's claim tables (`intervals.claim_summary`): a sentence per claim.

# %%
findings.report([claims])  # fills in the table under the first code cell
Markdown(claim_summary(P.name, [claims]))
