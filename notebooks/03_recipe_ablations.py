# %% [markdown]
# # 03 — Recipe ablations for repeated data
#
# **Question.** Recipes tuned for one pass should change when data repeat. The study finds: REPACK
# (shuffle documents and pack new sequences every epoch) beats SHUFFLE (re-batch the same sequences)
# beats REPEAT (same sequences, same batches); positive weight decay on the embeddings helps, tying
# alone does little, both together are best; and the best stopping point moves later.
#
# **Method.** Each ablation reuses the learning rate and weight decay tuned per batch size in
# notebook 02 (pool 0), so only the ablated field changes (`P.tuned_grid`: the preset's first model,
# the original recipe with the ablated fields replaced); identical configurations are not retrained.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu | FILE.yaml
workers = None  # parallel runs; default: the preset's

# %%
from repro.analysis import analyses, figures
from repro.study import open_study

study = open_study(preset, workers=workers)
P = study.preset
print(study.summary())

# %% [markdown]
# The lr and weight decay tuned per batch size in notebook 02, on pool 0:

# %%
pools = study.pools()
runs02, evals02 = study.sweep(study.batch_sweep_grid())
tuned = analyses.batch_endpoints(runs02, evals02)
model = P.models[0]
tuned0 = tuned[(tuned["pool"] == str(pools[0])) & (tuned["model"] == model)].set_index("batch_size")
tuned0[["lr", "weight_decay", "stop_epoch", "best_val_loss"]]

# %% [markdown]
# ## Epoch orderings: REPEAT vs SHUFFLE vs REPACK
#
# At the preset's two ablation batch sizes, on pool 0 (one pool: the figure says n=1).

# %%
loader_grid = P.tuned_grid(
    tuned0, P.ablation_batch_sizes, pools[:1], {"loader": ["repeat", "shuffle", "repack"]}
)
loader_ends = analyses.batch_endpoints(*study.sweep(loader_grid), ["loader"])
loaders = analyses.best_per(loader_ends, ["batch_size", "loader"])
study.save(figures.loaders(loader_ends), "03_loaders")
loaders

# %% [markdown]
# ## Weight tying × embedding weight decay
#
# At the batch size that notebook 02 found best on pool 0.

# %%
b_best = int(tuned0["best_val_loss"].idxmin())
embedding_axes = {
    "tie_embeddings": [False, True],
    "embedding_weight_decay": list(P.embedding_weight_decays),
}
embedding_fields = ["tie_embeddings", "embedding_weight_decay"]
embedding_ends = analyses.batch_endpoints(
    *study.sweep(P.tuned_grid(tuned0, [b_best], pools[:1], embedding_axes)), embedding_fields
)
embeddings = analyses.best_per(embedding_ends, embedding_fields)
study.save(figures.tying_embedding_decay(embedding_ends, b_best), "03_tying_embedding_decay")
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
combined_ends = analyses.batch_endpoints(
    *study.sweep(P.tuned_grid(tuned0, P.batch_sizes, pools, {}, **combined_recipe))
)
original_ends = analyses.batch_endpoints(
    *study.sweep(P.tuned_grid(tuned0, P.batch_sizes, pools, {}))
)
combined = analyses.best_per(combined_ends, ["batch_size"])
original = analyses.best_per(original_ends, ["batch_size"])
recipes = {
    "original (SHUFFLE, untied, no emb. decay)": original_ends,
    f"combined (REPACK, tied, emb. decay {emb_wd:g})": combined_ends,
}
study.save(figures.combined_vs_original(recipes, P.batch_sizes), "03_combined_vs_original")
original.merge(combined, on="batch_size", suffixes=(" original", " combined"))

# %%
print(
    f"{len(loaders)} loader endpoints, {len(embeddings)} tying x embedding-decay endpoints, "
    f"{len(combined)} batch sizes compared"
)

# %% [markdown]
# ## Claims vs measurement

# %%
claims = analyses.recipe_claims(loader_ends, embeddings, original, combined, study.store)
study.save_table(claims, "03_claims")
claims
