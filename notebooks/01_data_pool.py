# %% [markdown]
# # 01 — The data pool
#
# **What this run found** (each claim's verdict, effect and interval, the paper's claim beside
# it) is the table under the first code cell, filled in from this run's claim tables when the
# notebook reaches them; below, the question states what the papers claim.
#
# **Question.** Multi-epoch pretraining starts from a *finite pool of unique documents*: the same
# documents are seen again every epoch, while other documents are held out for validation. The study
# uses a fixed ~200M-token DCLM-Baseline pool split by document. What does our pool look like, and
# are independently sampled pools really independent?
#
# **Method.** `repro data build` draws documents with a seed until the training split reaches its
# token target (exact duplicates dropped), holds out validation documents drawn first (so no
# validation document contributes a token to training), and tokenizes with a byte-level BPE trained
# on the training documents. Further pools use other seeds but the same validation documents and
# tokenizer, so their validation losses are comparable.

# %% tags=["parameters"]
import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # `repro preset list`, or FILE.yaml
workers = None  # parallel runs; default: the preset's
train = os.environ.get("REPRO_TRAIN", "0") in ("1", "true")  # else read results/<preset>.tar.xz
dry_run = False  # the built-in preset shrunk to CPU size (`repro reproduce --dry-run`)

# %%
from IPython.display import Markdown

from repro.analysis import figures_pool
from repro.analysis.findings import Findings
from repro.analysis.intervals import claim_count, claim_summary
from repro.analysis.pools import (
    bayes_floor,
    pool_claims,
    pool_overlap,
    pool_table,
    train_val_shared_docs,
)
from repro.study import notebook_study

study = notebook_study(globals())  # checks the parameters above, prints what the study trains
findings = Findings(study.preset.name)  # this run's verdicts, filled in at the end
P = study.preset

# %% [markdown]
# ## Building the pools
#
# Building is a no-op when a pool with the same arguments already exists. One row per pool and
# split (`pools.pool_table`): documents, tokens, document length in tokens, and the Bayes floor
# where the source knows it.

# %%
pools = study.pools()
table = pool_table(pools)
table

# %% [markdown]
# ## Document lengths
#
# A pool's documents vary in length by orders of magnitude; packing joins them with an end-of-text
# token and cuts fixed-length sequences of `seq_len` tokens, so long documents span several
# sequences and short ones share a sequence.

# %%
study.save(figures_pool.doc_lengths(pools[0], P.grid.seq_len), "01_doc_lengths")

# %% [markdown]
# ## Train/validation split and independent pools
#
# Pools drawn with different seeds should share few training documents (the source is sampled
# without replacement in a seeded order) but have identical validation sets (`pools.pool_overlap`
# compares documents as token sequences).

# %%
overlap = pool_overlap(pools)
overlap

# %%
study.save(figures_pool.split_tokens(table), "01_split_tokens")

# %% [markdown]
# ## The Bayes floor (synthetic source only)
#
# For the synthetic source every document's exact log-probability is known, so the pool stores the
# Bayes-optimal loss: `-sum log p(doc) / sum (tokens + 1)` in nats per token (EOS counted). No model
# can beat it on average; the gap to it is what training can still win. Notebook 02 draws it next to
# the tuned losses.

# %%
floor = bayes_floor(pools[0])
print(
    f"Bayes floor of the validation split: {floor:.4f} nats/token"
    if floor is not None
    else f"source {P.pools.recipe.source!r} has no known Bayes floor"
)

# %% [markdown]
# ## Claims vs measurement
#
# `pools.pool_claims`: every validation document checked against every training document of its
# pool, and the pools against each other.

# %%
claims = pool_claims(overlap, train_val_shared_docs(pools))
table = study.save_claims(claims, "01_claims")
print(claim_count(claims))
Markdown(table.read_text())  # the claims in full, as committed in figures/<preset>/01_claims.md

# %% [markdown]
# ## Summary
#
# Generated from this notebook's claim tables (`intervals.claim_summary`): a sentence per claim.

# %%
findings.report([claims])  # fills in the table under the first code cell
Markdown(claim_summary(P.name, [claims]))
