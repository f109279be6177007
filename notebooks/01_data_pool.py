# %% [markdown]
# # 01 — The data pool
#
# **Question.** Multi-epoch pretraining starts from a *finite pool of unique documents*: the same
# documents are seen again every epoch, while other documents are held out for validation. The study
# uses a fixed ~200M-token DCLM-Baseline pool split by document. What does our pool look like, and are
# independently sampled pools really independent?
#
# **Method.** `repro data build` draws documents with a seed until the training split reaches its token
# target (exact duplicates dropped), holds out validation documents drawn first (so no validation
# document contributes a token to training), and tokenizes with a byte-level BPE trained on the
# training documents. Further pools use other seeds but the same validation documents and tokenizer,
# so their validation losses are comparable.

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

# %% [markdown]
# ## Building the pools
#
# Building is a no-op when a pool with the same arguments already exists.

# %%
pools = study.pools()
table = analyses.pool_table(pools)
table

# %% [markdown]
# Deterministic summary (checked by nbval in CI: same seed, same pool):

# %%
print(table[["pool", "split", "docs", "tokens"]].to_string(index=False))

# %% [markdown]
# ## Document lengths
#
# A pool's documents vary in length by orders of magnitude; packing joins them with an end-of-text
# token and cuts fixed-length sequences, so long documents span several sequences and short ones
# share a sequence.

# %%
from repro.data.pool import load_pool

fig, ax = plt.subplots()
for path in pools[:1]:
    pool = load_pool(path)
    for split in ("train", "val"):
        lengths = pool.split(split).doc_lengths()
        bins = np.logspace(np.log10(max(lengths.min(), 1)), np.log10(lengths.max() + 1), 30)
        ax.hist(lengths, bins=bins, alpha=0.6, label=f"{split} ({len(lengths)} docs)")
ax.axvline(P.seq_len, color="k", linestyle=":", label=f"seq_len = {P.seq_len}")
ax.set_xscale("log")
ax.set_xlabel("document length (tokens)")
ax.set_ylabel("documents")
ax.set_title("Document lengths (pool 0)")
ax.legend()
study.save(fig, "01_doc_lengths")

# %% [markdown]
# ## Train/validation split and independent pools
#
# Pools drawn with different seeds should share few training documents (the source is sampled without
# replacement in a seeded order) but have identical validation sets.

# %%
overlap = analyses.pool_overlap(pools)
overlap

# %%
fig, ax = plt.subplots()
counts = table.pivot_table(index="pool", columns="split", values="tokens")
counts.plot.bar(ax=ax, rot=0)
ax.set_ylabel("tokens")
ax.set_xlabel("pool")
ax.set_title("Tokens per split")
study.save(fig, "01_split_tokens")

# %% [markdown]
# ## The Bayes floor (synthetic source only)
#
# For the synthetic source every document's exact log-probability is known, so the pool stores the
# Bayes-optimal loss: `-sum log p(doc) / sum (tokens + 1)` in nats per token (EOS counted). No model can
# beat it on average; the gap to it is what training can still win.

# %%
floor = load_pool(pools[0]).meta.get("bayes_floor_nats_per_token")
print(f"Bayes floor of the validation split: {floor:.4f} nats/token" if floor is not None
      else f"source {P.pool.source!r} has no known Bayes floor")

# %% [markdown]
# ## Claims vs measurement

# %%
leaks = analyses.train_val_shared_docs(pools)
claims = pd.DataFrame([
    ["no validation document contributes to training", "yes (document-level split)",
     f"validation documents found in training: {leaks}", "yes" if sum(leaks) == 0 else "no"],
    ["independent pools share the validation set", "yes (fixed held-out set)",
     f"identical val: {bool(overlap['identical val'].all())}", "yes" if overlap["identical val"].all() else "no"],
    ["independent pools differ in training documents", "yes",
     f"shared train docs: {overlap['shared train docs'].tolist()} of {overlap['train docs a'].tolist()}",
     "yes" if (overlap["shared train docs"] < overlap["train docs a"]).all() else "no"],
], columns=analyses.CLAIM_COLUMNS)
study.save_table(claims, "01_claims")
claims
