"""Write notebooks/*.ipynb from the cell sources below.

    python tools/make_notebooks.py                      # sources only
    python tools/make_notebooks.py runs/smoke/notebooks # and the outputs of the `# NBVAL_CHECK_OUTPUT`
                                                        # cells from smoke-executed copies (nbval compares them)
"""

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

PARAMETERS = '''import os

preset = os.environ.get("REPRO_PRESET", "cpu")  # smoke | cpu | gpu-small | gpu
data_dir = None      # default: <project>/data/pools
results_dir = None   # default: <project>/runs/<preset>
workers = None       # parallel runs; default: the preset's
source = None        # override the preset's data source, e.g. "hf:mlfoundations/dclm-baseline-1.0"'''

SETUP = '''import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from pathlib import Path

from repro import analyses, plots
from repro.study import open_study

study = open_study(preset, data_dir=data_dir, results_dir=results_dir, workers=workers, source=source)
P = study.preset
print(f"preset {P.name}: source {P.pool.source}, {P.pool.tokens:,} training tokens per pool, models {list(P.models)}, "
      f"seq_len {P.seq_len}, batch sizes {list(P.batch_sizes)}, {P.epochs} epochs")'''


def notebook(cells):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    out = []
    for kind, source, *tags in cells:
        cell = new_markdown_cell(source) if kind == "md" else new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        out.append(cell)
    nb.cells = out
    return nb


NB01 = [
    ("md", """# 01 — The data pool

**Question.** Multi-epoch pretraining starts from a *finite pool of unique documents*: the same
documents are seen again every epoch, while other documents are held out for validation. The study
uses a fixed ~200M-token DCLM-Baseline pool split by document. What does our pool look like, and are
independently sampled pools really independent?

**Method.** `repro data build` draws documents with a seed until the training split reaches its token
target (exact duplicates dropped), holds out validation documents drawn first (so no validation
document contributes a token to training), and tokenizes with a byte-level BPE trained on the
training documents. Further pools use other seeds but the same validation documents and tokenizer,
so their validation losses are comparable."""),
    ("code", PARAMETERS, "parameters"),
    ("code", SETUP),
    ("md", "## Building the pools\n\nBuilding is a no-op when a pool with the same arguments already exists."),
    ("code", """pools = study.pools()
table = analyses.pool_table(pools)
table"""),
    ("md", "Deterministic summary (checked by nbval in CI: same seed, same pool):"),
    ("code", """# NBVAL_CHECK_OUTPUT
print(table[["pool", "split", "docs", "tokens"]].to_string(index=False))"""),
    ("md", """## Document lengths

A pool's documents vary in length by orders of magnitude; packing joins them with an end-of-text
token and cuts fixed-length sequences, so long documents span several sequences and short ones
share a sequence."""),
    ("code", """from repro.data.pool import load_pool

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
study.save(fig, "01_doc_lengths")"""),
    ("md", """## Train/validation split and independent pools

Pools drawn with different seeds should share few training documents (the source is sampled without
replacement in a seeded order) but have identical validation sets."""),
    ("code", """overlap = analyses.pool_overlap(pools)
overlap"""),
    ("code", """fig, ax = plt.subplots()
counts = table.pivot_table(index="pool", columns="split", values="tokens")
counts.plot.bar(ax=ax, rot=0)
ax.set_ylabel("tokens")
ax.set_xlabel("pool")
ax.set_title("Tokens per split")
study.save(fig, "01_split_tokens")"""),
    ("md", """## The Bayes floor (synthetic source only)

For the synthetic source every document's exact log-probability is known, so the pool stores the
Bayes-optimal loss: `-sum log p(doc) / sum (tokens + 1)` in nats per token (EOS counted). No model can
beat it on average; the gap to it is what training can still win."""),
    ("code", """floor = load_pool(pools[0]).meta.get("bayes_floor_nats_per_token")
print(f"Bayes floor of the validation split: {floor:.4f} nats/token" if floor is not None
      else f"source {P.pool.source!r} has no known Bayes floor")"""),
    ("md", "## Claims vs measurement"),
    ("code", """claims = pd.DataFrame([
    ["no validation document contributes to training", "by construction", "checked in tests/test_data.py", "yes"],
    ["independent pools share the validation set", "yes (fixed held-out set)",
     f"identical val: {bool(overlap['identical val'].all())}", "yes" if overlap["identical val"].all() else "no"],
    ["independent pools differ in training documents", "yes",
     f"shared train docs: {overlap['shared train docs'].tolist()} of {overlap['train docs a'].tolist()}",
     "yes" if (overlap["shared train docs"] < overlap["train docs a"]).all() else "no"],
], columns=analyses.CLAIM_COLUMNS)
claims"""),
]

NB02 = [
    ("md", """# 02 — Batch size with per-batch tuned learning rate, weight decay and stopping point

**Question.** When the data are repeated for many epochs, which batch size gives the lowest validation
loss? The study finds a U-shape: smaller batches than usual win (gradient noise regularises), but the
smallest batch overfits (lower training loss, worse validation loss).

**Method.** For every batch size we sweep the learning rate (a grid that moves with √batch) and the
weight decay, evaluate validation loss twice per epoch, and keep the best (lr, weight decay,
evaluation point) — the *tuned endpoint*. The recipe is the one-pass recipe of Kim et al.:
sequences packed once and reshuffled each epoch (SHUFFLE), untied embeddings, no embedding decay,
AdamW (0.9, 0.95), cosine with 1% warmup. Every sweep runs on two independently sampled pools."""),
    ("code", PARAMETERS, "parameters"),
    ("code", SETUP),
    ("code", """from repro.presets import ORIGINAL_RECIPE

pools = study.pools()
runs, evals = study.sweep(P.batch_sweep_grid(pools, **ORIGINAL_RECIPE))
print(f"{len(runs)} runs: {runs['status'].value_counts().to_dict()}")"""),
    ("code", """# NBVAL_CHECK_OUTPUT
print(f"{len(runs)} runs, {runs['batch_size'].nunique()} batch sizes, {runs['pool'].nunique()} pools")"""),
    ("md", "## Tuned endpoints\n\nOne row per pool × model × batch size. A warning names any group whose chosen lr or weight decay sits on the edge of its grid."),
    ("code", """endpoints = analyses.batch_endpoints(runs, evals)
endpoints["pool"] = endpoints["pool"].map(lambda p: Path(p).name)
for _, row in endpoints[endpoints["edge"] != ""].iterrows():
    print(f"grid edge: {row['pool']}, batch {row['batch_size']}: {row['edge']}")
endpoints[["pool", "model", "batch_size", "lr", "weight_decay", "stop_epoch", "best_val_loss", "train_loss_at_best"]]"""),
    ("md", "## Best validation loss vs batch size"),
    ("code", """agg = analyses.across_pools(endpoints)
fig, ax = plt.subplots()
for model, group in agg.groupby("model"):
    ax.errorbar(group["batch_size"], group["mean"], yerr=[group["mean"] - group["min"], group["max"] - group["mean"]],
                capsize=3, label=f"{model} (mean, min-max over {int(group['count'].max())} pools)", **plots.MEASURED)
plots.batch_axis(ax, P.batch_sizes)
ax.set_ylabel("best validation loss (nats/token)")
ax.set_title("Tuned validation loss vs batch size")
ax.legend()
study.save(fig, "02_best_loss_vs_batch")
agg"""),
    ("md", """## Training and validation curves

The tuned run at the smallest, an intermediate and the largest batch (pool 0). Does the smallest
batch reach a lower training loss but a worse validation loss?"""),
    ("code", """model = P.models[0]
pool0 = endpoints[(endpoints["pool"] == endpoints["pool"].iloc[0]) & (endpoints["model"] == model)].sort_values("batch_size")
picks = pool0.iloc[sorted({0, len(pool0) // 2, len(pool0) - 1})]
fig, ax = plt.subplots()
for color, (_, end) in zip(plots.PALETTE, picks.iterrows()):
    curve = analyses.endpoint_curve(runs, evals, end)
    ax.plot(curve["epoch"], curve["val_loss"], color=color, label=f"batch {end['batch_size']} val", **plots.MEASURED)
    ax.plot(curve["epoch"], curve["train_loss"], color=color, linestyle="--", label=f"batch {end['batch_size']} train")
ax.set_xlabel("epoch")
ax.set_ylabel("loss (nats/token)")
ax.set_title(f"Tuned runs, {model}")
ax.legend(ncol=2, fontsize=8)
study.save(fig, "02_curves")"""),
    ("md", "## Claims vs measurement"),
    ("code", """claims = analyses.batch_sweep_claims(runs, evals, endpoints)
claims"""),
]

NB03 = [
    ("md", """# 03 — Recipe ablations for repeated data

**Question.** Recipes tuned for one pass should change when data repeat. The study finds: REPACK
(shuffle documents and pack new sequences every epoch) beats SHUFFLE (re-batch the same sequences)
beats REPEAT (same sequences, same batches); positive weight decay on the embeddings helps, tying
alone does little, both together are best; and the best stopping point moves later.

**Method.** Each ablation reuses the learning rate and weight decay tuned per batch size in
notebook 02 (pool 0), so only the ablated field changes; identical configurations are not retrained."""),
    ("code", PARAMETERS, "parameters"),
    ("code", SETUP),
    ("code", """from repro.presets import ORIGINAL_RECIPE

pools = study.pools()
runs02, evals02 = study.sweep(P.batch_sweep_grid(pools, **ORIGINAL_RECIPE))
tuned = analyses.batch_endpoints(runs02, evals02)
model = P.models[0]
tuned0 = tuned[(tuned["pool"] == str(pools[0])) & (tuned["model"] == model)].set_index("batch_size")
tuned0[["lr", "weight_decay", "stop_epoch", "best_val_loss"]]"""),
    ("md", "## Epoch orderings: REPEAT vs SHUFFLE vs REPACK"),
    ("code", """def tuned_grid(batch_sizes, pools_used, axes, **fixed):
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
loaders"""),
    ("md", "## Weight tying × embedding weight decay\n\nAt the batch size that notebook 02 found best on pool 0."),
    ("code", """b_best = int(tuned0["best_val_loss"].idxmin())
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
embeddings"""),
    ("md", """## The combined recipe vs the original

Combined: REPACK + tied embeddings + the best positive embedding decay found above, at every batch
size and on every pool (lr and weight decay as tuned for the original recipe)."""),
    ("code", """tied_pos = embeddings[(embeddings["tie_embeddings"]) & (embeddings["embedding_weight_decay"] > 0)]
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
original.merge(combined, on="batch_size", suffixes=(" original", " combined"))"""),
    ("md", "## Claims vs measurement"),
    ("code", """claims = analyses.recipe_claims(loaders, embeddings, original, combined)
claims"""),
]

def checked_outputs(executed: Path) -> dict[str, list]:
    """Outputs of the NBVAL_CHECK_OUTPUT cells of an executed notebook, keyed by cell source."""
    nb = nbformat.read(executed, as_version=4)
    return {c.source: c.outputs for c in nb.cells if c.cell_type == "code" and c.source.startswith("# NBVAL_CHECK_OUTPUT")}


if __name__ == "__main__":
    folder = Path(__file__).resolve().parent.parent / "notebooks"
    for name, cells in (("01_data_pool", NB01), ("02_batch_sweep", NB02), ("03_recipe_ablations", NB03)):
        nb = notebook(cells)
        if len(sys.argv) > 1:
            outputs = checked_outputs(Path(sys.argv[1]) / f"{name}.ipynb")
            for cell in nb.cells:
                if cell.cell_type == "code" and cell.source in outputs:
                    cell.outputs = outputs[cell.source]
                    cell.execution_count = 1
        nbformat.write(nb, folder / f"{name}.ipynb")
