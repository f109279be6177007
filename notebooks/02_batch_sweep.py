# %% [markdown]
# # 02 — Batch size with per-batch tuned learning rate, weight decay and stopping point
#
# **Question.** When the data are repeated for many epochs, which batch size gives the lowest
# validation loss? The study finds a U-shape: smaller batches than usual win (gradient noise
# regularises), but the smallest batch overfits (lower training loss, worse validation loss).
#
# **Method.** For every batch size (in sequences of `seq_len` tokens) we sweep the learning rate (a
# grid that moves with √batch) and the weight decay, evaluate validation loss every `eval_every`
# epochs (a preset setting), and keep the best (lr, weight decay, evaluation point) — the *tuned
# endpoint*. The recipe is the one-pass recipe of Kim et al. (docs/REFERENCE_RECIPE.md): sequences
# packed once and reshuffled each epoch (SHUFFLE), untied embeddings, weight decay on every linear
# layer (the output head included) but not on the token embedding, AdamW (0.9, 0.95), cosine to
# zero after 1% warmup. Every sweep runs on two independently sampled pools. The summary below
# lists where this preset departs from that recipe.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu | FILE.yaml
workers = None  # parallel runs; default: the preset's

# %%
from pathlib import Path

from repro.analysis import analyses, figures
from repro.study import open_study

study = open_study(preset, workers=workers)
P = study.preset
print(study.summary())

# %%
pools = study.pools()
runs, evals = study.sweep(
    study.batch_sweep_grid()
)  # every batch size x lr x weight decay, on every pool
print(f"{len(runs)} runs: {runs['status'].value_counts().to_dict()}")

# %%
print(
    f"{len(runs)} runs, {runs['batch_size'].nunique()} batch sizes, {runs['pool'].nunique()} pools"
)

# %% [markdown]
# ## Tuned endpoints
#
# One row per pool × model × batch size. A warning names any group whose chosen lr or weight decay
# sits on the edge of its grid. `train_loss_at_best` is the training loss logged at the chosen
# evaluation: the mean over the steps since the previous evaluation.

# %%
endpoints = analyses.batch_endpoints(runs, evals)
endpoints["pool"] = endpoints["pool"].map(lambda p: Path(p).name)
for _, row in endpoints[endpoints["edge"] != ""].iterrows():
    print(f"grid edge: {row['pool']}, batch {row['batch_size']}: {row['edge']}")
endpoints[
    [
        "pool",
        "model",
        "batch_size",
        "lr",
        "weight_decay",
        "stop_epoch",
        "best_val_loss",
        "train_loss_at_best",
    ]
]

# %% [markdown]
# ## Best validation loss vs batch size
#
# Mean over pools with the min–max range; the training loss at the same tuned endpoints shows the
# over-fitting signature the paper reads (a batch whose training loss falls while its validation
# loss rises). The dotted line is the validation split's Bayes floor, where the source knows it.

# %%
fig = figures.best_loss_vs_batch(endpoints, P.batch_sizes, analyses.bayes_floor(pools[0]))
study.save(fig, "02_best_loss_vs_batch")
analyses.across_pools(endpoints)

# %% [markdown]
# ## Training and validation curves
#
# The tuned run at the smallest, an intermediate and the largest batch (pool 0). Does the smallest
# batch reach a lower training loss but a worse validation loss?

# %%
model = P.models[0]
pool0 = endpoints[
    (endpoints["pool"] == endpoints["pool"].iloc[0]) & (endpoints["model"] == model)
].sort_values("batch_size")
picks = pool0.iloc[sorted({0, len(pool0) // 2, len(pool0) - 1})]
study.save(
    figures.curves(evals, picks, f"Tuned runs, {model}, {pool0['pool'].iloc[0]}"), "02_curves"
)

# %% [markdown]
# ## Claims vs measurement

# %%
claims = analyses.batch_sweep_claims(runs, evals, endpoints, P.one_pass_batch_size)
study.save_table(claims, "02_claims")
claims
