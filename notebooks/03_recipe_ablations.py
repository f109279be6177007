# %% [markdown]
# # 03 — Recipe ablations for repeated data
#
# **Question.** Recipes tuned for one pass should change when data repeat. The study finds: REPACK
# (shuffle documents and pack new sequences every epoch) beats SHUFFLE (re-batch the same sequences)
# beats REPEAT (same sequences, same batches); positive weight decay on the embeddings helps, tying
# alone does little, both together are best; and the best stopping point moves later.
#
# **Method.** Each ablation reuses the learning rate and weight decay tuned per batch size in
# notebook 02 (pool 0), so only the ablated field changes; identical configurations are not retrained.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu | FILE.yaml
workers = None  # parallel runs; default: the preset's

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from pathlib import Path

from repro import analyses, plots
from repro.study import open_study

study = open_study(preset, workers=workers)
P = study.preset
print(study.summary())

# %%
from repro.presets import ORIGINAL_RECIPE

pools = study.pools()
runs02, evals02 = study.sweep(study.batch_sweep_grid())
tuned = analyses.batch_endpoints(runs02, evals02)
model = P.models[0]
tuned0 = tuned[(tuned["pool"] == str(pools[0])) & (tuned["model"] == model)].set_index("batch_size")
tuned0[["lr", "weight_decay", "stop_epoch", "best_val_loss"]]


# %% [markdown]
# ## Epoch orderings: REPEAT vs SHUFFLE vs REPACK

# %%
def tuned_grid(batch_sizes, pools_used, axes, **fixed):
    rules = [{"if": {"batch_size": b}, "axes": {"lr": [tuned0.loc[b, "lr"]], "weight_decay": [tuned0.loc[b, "weight_decay"]]}}
             for b in batch_sizes]
    return {"fixed": P.run_fields(model=model, **(ORIGINAL_RECIPE | fixed)),
            "axes": {"pool": [str(p) for p in pools_used], "batch_size": list(batch_sizes)} | axes,
            "when": rules}

runs, evals = study.sweep(tuned_grid(P.ablation_batch_sizes, pools[:1], {"loader": ["repeat", "shuffle", "repack"]}))
loaders = analyses.best_per(analyses.batch_endpoints(runs, evals, ["loader"]), ["batch_size", "loader"])
fig, ax = plt.subplots()
width = 0.25
for i, loader in enumerate(["repeat", "shuffle", "repack"]):
    part = loaders[loaders["loader"] == loader]
    ax.bar(np.arange(len(part)) + (i - 1) * width, part["best_val_loss"], width, label=loader.upper())
ax.set_xticks(np.arange(len(P.ablation_batch_sizes)))
ax.set_xticklabels([f"batch {b}" for b in P.ablation_batch_sizes])
ax.set_ylabel("best validation loss (nats/token)")
ax.set_ylim(loaders["best_val_loss"].min() - 0.1, loaders["best_val_loss"].max() + 0.05)
ax.set_title("Epoch orderings")
ax.legend()
study.save(fig, "03_loaders")
loaders

# %% [markdown]
# ## Weight tying × embedding weight decay
#
# At the batch size that notebook 02 found best on pool 0.

# %%
b_best = int(tuned0["best_val_loss"].idxmin())
runs, evals = study.sweep(tuned_grid([b_best], pools[:1], {"tie_embeddings": [False, True],
                                                            "embedding_weight_decay": list(P.embedding_weight_decays)}))
embeddings = analyses.best_per(analyses.batch_endpoints(runs, evals, ["tie_embeddings", "embedding_weight_decay"]),
                               ["tie_embeddings", "embedding_weight_decay"])
fig, ax = plt.subplots()
for tie, part in embeddings.groupby("tie_embeddings"):
    ax.plot(range(len(part)), part["best_val_loss"], label="tied" if tie else "untied", **plots.MEASURED)
ax.set_xticks(range(len(P.embedding_weight_decays)))
ax.set_xticklabels([f"{w:g}" for w in P.embedding_weight_decays])
ax.set_xlabel("embedding weight decay")
ax.set_ylabel("best validation loss (nats/token)")
ax.set_title(f"Tying x embedding decay (batch {b_best})")
ax.legend()
study.save(fig, "03_tying_embedding_decay")
embeddings

# %% [markdown]
# ## The combined recipe vs the original
#
# Combined: REPACK + tied embeddings + the best positive embedding decay found above, at every batch
# size and on every pool (lr and weight decay as tuned for the original recipe).

# %%
tied_pos = embeddings[(embeddings["tie_embeddings"]) & (embeddings["embedding_weight_decay"] > 0)]
emb_wd = float(tied_pos.loc[tied_pos["best_val_loss"].idxmin(), "embedding_weight_decay"])
combined_recipe = {"loader": "repack", "tie_embeddings": True, "embedding_weight_decay": emb_wd}
runs, evals = study.sweep(tuned_grid(P.batch_sizes, pools, {}, **combined_recipe))
combined = analyses.best_per(analyses.batch_endpoints(runs, evals), ["batch_size"])
original_runs, original_evals = study.sweep(tuned_grid(P.batch_sizes, pools, {}))
original = analyses.best_per(analyses.batch_endpoints(original_runs, original_evals), ["batch_size"])
fig, ax = plt.subplots()
ax.plot(original["batch_size"], original["best_val_loss"], label="original (SHUFFLE, untied, no emb. decay)", **plots.MEASURED)
ax.plot(combined["batch_size"], combined["best_val_loss"], label=f"combined (REPACK, tied, emb. decay {emb_wd:g})", **plots.MEASURED)
plots.batch_axis(ax, P.batch_sizes)
ax.set_ylabel("best validation loss (nats/token, mean over pools)")
ax.set_title("Combined recipe vs original")
ax.legend()
study.save(fig, "03_combined_vs_original")
original.merge(combined, on="batch_size", suffixes=(" original", " combined"))

# %%
print(f"{len(loaders)} loader endpoints, {len(embeddings)} tying x embedding-decay endpoints, {len(combined)} batch sizes compared")

# %% [markdown]
# ## Claims vs measurement

# %%
claims = analyses.recipe_claims(loaders, embeddings, original, combined)
study.save_table(claims, "03_claims")
claims
