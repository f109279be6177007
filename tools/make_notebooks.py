"""Write notebooks/*.ipynb from the cell sources below.

    python tools/make_notebooks.py                      # keeps the stored outputs of checked cells
    python tools/make_notebooks.py runs/smoke/notebooks # takes the outputs of the `# NBVAL_CHECK_OUTPUT`
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
    ("code", """leaks = analyses.train_val_shared_docs(pools)
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
claims"""),
]

NB02 = [
    ("md", """# 02 — Batch size with per-batch tuned learning rate, weight decay and stopping point

**Question.** When the data are repeated for many epochs, which batch size gives the lowest validation
loss? The study finds a U-shape: smaller batches than usual win (gradient noise regularises), but the
smallest batch overfits (lower training loss, worse validation loss).

**Method.** For every batch size we sweep the learning rate (a grid that moves with √batch) and the
weight decay, evaluate validation loss every `eval_every` epochs (a preset setting), and keep the best
(lr, weight decay, evaluation point) — the *tuned endpoint*. The recipe is the one-pass recipe of Kim et al.:
sequences packed once and reshuffled each epoch (SHUFFLE), untied embeddings, no embedding decay,
AdamW (0.9, 0.95), cosine with 1% warmup. Every sweep runs on two independently sampled pools."""),
    ("code", PARAMETERS, "parameters"),
    ("code", SETUP),
    ("code", """pools = study.pools()
runs, evals = study.sweep(study.batch_sweep_grid())  # every batch size x lr x weight decay, on every pool
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
    curve = analyses.endpoint_curve(evals, end)
    ax.plot(curve["epoch"], curve["val_loss"], color=color, label=f"batch {end['batch_size']} val", **plots.MEASURED)
    ax.plot(curve["epoch"], curve["train_loss"], color=color, linestyle="--", label=f"batch {end['batch_size']} train")
ax.set_xlabel("epoch")
ax.set_ylabel("loss (nats/token)")
ax.set_title(f"Tuned runs, {model}")
ax.legend(ncol=2, fontsize=8)
study.save(fig, "02_curves")"""),
    ("md", "## Claims vs measurement"),
    ("code", """claims = analyses.batch_sweep_claims(runs, evals, endpoints, P.one_pass_batch_size)
study.save_table(claims, "02_claims")
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
runs02, evals02 = study.sweep(study.batch_sweep_grid())
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
    ("code", """# NBVAL_CHECK_OUTPUT
print(f"{len(loaders)} loader endpoints, {len(embeddings)} tying x embedding-decay endpoints, {len(combined)} batch sizes compared")"""),
    ("md", "## Claims vs measurement"),
    ("code", """claims = analyses.recipe_claims(loaders, embeddings, original, combined)
study.save_table(claims, "03_claims")
claims"""),
]
NB04 = [
    ("md", """# 04 — The GPU-time frontier: GPUs and wall-clock time as separate resources

**Question.** Notebook 02 treated compute as free. But a small batch needs many *sequential* steps,
and more GPUs cannot shorten that chain. With G GPUs and a deadline T, which batch size reaches the
lowest validation loss? The study finds that tight deadlines favour larger batches, and that under a
fixed deadline a smaller batch on fewer GPUs can still beat a larger batch on more GPUs.

**Method.** We reuse the runs of notebook 02 (pool 0, every lr / weight decay, every evaluation point)
and price each evaluation point by the time of the steps before it. Main frontier: the idealised
model in *step units* (one GPU processes `frontier_micro_batch` sequences per unit; a step of batch B
on G GPUs costs max(1, ceil(B / (G m))) units). The frontier is computed from the observed curves,
never from fitted ones. Latency-oriented parallelism is a *projection* and drawn dashed."""),
    ("code", PARAMETERS, "parameters"),
    ("code", SETUP),
    ("code", """from repro import frontier

pools = study.pools()
runs, evals = study.sweep(study.batch_sweep_grid())
runs0 = runs[(runs["pool"] == str(pools[0])) & (runs["model"] == P.models[0])]
evals0 = evals[evals["run_id"].isin(runs0["run_id"])]
m = P.frontier_micro_batch
step = lambda b, g: frontier.step_units(b, g, m)
points = evals0.merge(runs0[["run_id", "batch_size"]], on="run_id")
first = min(step(int(b), max(P.gpu_counts)) * s for b, s in zip(points["batch_size"], points["step"]))
last = max(step(int(b), 1) * s for b, s in zip(points["batch_size"], points["step"]))
deadlines = np.unique(np.geomspace(first, last, 24).round(1))
table = frontier.frontier(evals0, runs0, P.gpu_counts, deadlines, step)
print(f"{len(runs0)} runs, {len(evals0)} evaluation points; deadlines {deadlines[0]:g} .. {deadlines[-1]:g} step units")"""),
    ("code", """# NBVAL_CHECK_OUTPUT
print(f"{len(table)} (GPUs, deadline) cells, {int(table['best_val_loss'].notna().sum())} reachable")"""),
    ("md", "## Best loss vs deadline, per GPU count"),
    ("code", """fig, ax = plt.subplots()
for g, part in table.groupby("gpus"):
    ax.step(part["deadline"], part["best_val_loss"], where="post", label=f"{g} GPU{'s' if g > 1 else ''}")
ax.set_xscale("log")
ax.set_xlabel("deadline (step units: one micro-batch forward+backward on one GPU)")
ax.set_ylabel("best validation loss (nats/token)")
ax.set_title("Frontier from observed curves")
ax.legend()
study.save(fig, "04_loss_vs_deadline")"""),
    ("md", "## Optimal batch size over (GPUs, deadline)"),
    ("code", """grid = table.pivot(index="gpus", columns="deadline", values="batch_size")
fig, ax = plt.subplots(figsize=(7, 3))
image = ax.imshow(np.log2(grid.values.astype(float)), aspect="auto", origin="lower", cmap="viridis")
ax.set_yticks(range(len(grid.index)))
ax.set_yticklabels(grid.index)
ticks = np.linspace(0, len(grid.columns) - 1, 6).astype(int)
ax.set_xticks(ticks)
ax.set_xticklabels([f"{grid.columns[i]:g}" for i in ticks])
ax.set_xlabel("deadline (step units)")
ax.set_ylabel("GPUs")
ax.grid(False)
bar = fig.colorbar(image, ax=ax, ticks=np.log2(P.batch_sizes))
bar.ax.set_yticklabels([str(b) for b in P.batch_sizes])
bar.set_label("optimal batch size (sequences)")
ax.set_title("Optimal batch size (white: nothing reachable yet)")
study.save(fig, "04_optimal_batch_heatmap")
grid"""),
    ("md", """## Fewer GPUs with a smaller batch vs more GPUs with a larger batch

Each batch size runs on the GPUs it fills (B / m of them). Where does the smaller batch on fewer GPUs
reach the lower loss under the same deadline?"""),
    ("code", """cross = frontier.crossovers(evals0, runs0, deadlines, step, m)
wins = cross[cross["smaller_wins"]]
fig, ax = plt.subplots()
for (b1, b2), part in cross.groupby(["small_batch", "large_batch"]):
    if part["smaller_wins"].any():
        ax.plot(part["deadline"], part["large_loss"] - part["small_loss"], label=f"{b1} on {part['small_gpus'].iloc[0]} vs {b2} on {part['large_gpus'].iloc[0]} GPUs", **plots.MEASURED)
ax.axhline(0, color="k", linewidth=0.8)
ax.set_xscale("log")
ax.set_xlabel("deadline (step units)")
ax.set_ylabel("loss(larger batch) - loss(smaller batch) (nats)")
ax.set_title("Positive: the smaller batch on fewer GPUs wins")
if wins.size:
    ax.legend(fontsize=7)
study.save(fig, "04_fewer_gpus_smaller_batch")
study.save_table(table.pivot(index="deadline", columns="gpus", values="best_val_loss").round(3).reset_index(), "04_frontier_table")
wins.sort_values("deadline").head(20)"""),
    ("md", """## Projection: latency-oriented parallelism

k GPUs per replica shorten a step to step_time / (1 + e (k - 1)) without enlarging the batch
(tensor / sequence / pipeline style), here with parallel efficiency e = 0.7. This is a projection
from the same observed curves, not a measurement."""),
    ("code", """efficiency = 0.7
g_max = max(P.gpu_counts)
fig, ax = plt.subplots()
measured = table[table["gpus"] == g_max]
ax.step(measured["deadline"], measured["best_val_loss"], where="post", label=f"{g_max} GPUs, data parallel (measured curves)")
for k in (2, 4):
    projected = frontier.frontier(evals0, runs0, [g_max], deadlines, step, speedup=frontier.latency_speedup(k, efficiency))
    ax.step(projected["deadline"], projected["best_val_loss"], where="post", label=f"x{k} GPUs per replica (projection, e={efficiency})", **plots.PROJECTED)
ax.set_xscale("log")
ax.set_xlabel("deadline (step units)")
ax.set_ylabel("best validation loss (nats/token)")
ax.set_title("Latency-oriented parallelism (projection)")
ax.legend(fontsize=8)
study.save(fig, "04_latency_projection")"""),
    ("md", """## The measured step-time model on this machine

`repro bench step-time` times forward + backward + optimizer for micro-batches 1..m of the preset's
model on this device. On more than one GPU the ring all-reduce model adds
2 (G-1)/G · bytes / bandwidth + 2 (G-1) · latency (NVLink inside a node, InfiniBand across)."""),
    ("code", """import torch
from repro import bench
from repro.data.pool import load_pool

device = "cuda" if torch.cuda.is_available() else "cpu"
measured_steps = bench.step_time(P.models[0], load_pool(pools[0]).vocab_size, P.seq_len, m, device)
step_model = frontier.MeasuredStepTime(measured_steps["seconds_by_micro_batch"], measured_steps["gradient_bytes"])
frontier.step_time_table(P.batch_sizes, P.gpu_counts, step_model.step_seconds).pivot(index="batch_size", columns="gpus", values="step_time")"""),
    ("md", """## Batch-size schedules as extra policies

A batch size that changes during training (`batch_schedule`, changing at epoch ends; the lr follows
lr x sqrt(B / B_ref) for Adam) is one more policy. Each schedule is priced step by step at its current
batch; here on one GPU and on the most GPUs, against the best fixed batch under the same deadline."""),
    ("code", """schedule_runs, schedule_evals = study.sweep(study.schedule_grid())
g_max = max(P.gpu_counts)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
policy_rows = []
for ax, g in zip(axes, (1, g_max)):
    fixed = table[table["gpus"] == g]
    ax.step(fixed["deadline"], fixed["best_val_loss"], where="post", label="best fixed batch")
    for name, schedule in P.batch_schedules.items():
        mine = schedule_runs[schedule_runs["batch_schedule"] == schedule]
        policy = frontier.frontier(schedule_evals[schedule_evals["run_id"].isin(mine["run_id"])], mine, [g], deadlines, step)
        ax.step(policy["deadline"], policy["best_val_loss"], where="post", label=f"{name} ({schedule})")
        both = policy.merge(fixed, on="deadline", suffixes=("_schedule", "_fixed")).dropna(subset=["best_val_loss_schedule"])
        policy_rows.append({"policy": name, "gpus": g, "deadlines reachable": len(both),
                            "deadlines where it beats every fixed batch": int((both["best_val_loss_schedule"] < both["best_val_loss_fixed"]).sum())})
    ax.set_xscale("log")
    ax.set_xlabel("deadline (step units)")
    ax.set_title(f"{g} GPU{'s' if g > 1 else ''}")
axes[0].set_ylabel("best validation loss (nats/token)")
axes[1].legend(fontsize=7)
study.save(fig, "04_schedule_policies")
policies = pd.DataFrame(policy_rows)
policies"""),
    ("md", "## Claims vs measurement"),
    ("code", """feasible = table[(table["gpus"] == g_max)].dropna()
tight, loose = feasible.iloc[0], feasible.iloc[-1]
claims = pd.DataFrame([
    ["tight deadlines favour larger batches", "yes",
     f"{g_max} GPUs: optimal batch {int(tight['batch_size'])} at T={tight['deadline']:g} vs {int(loose['batch_size'])} at T={loose['deadline']:g}",
     "yes" if tight["batch_size"] > loose["batch_size"] else "no"],
    ["under a fixed deadline a smaller batch on fewer GPUs can beat a larger batch on more GPUs", "yes",
     f"{len(wins)} of {len(cross)} (deadline, pair) comparisons" + (f", first at T={wins['deadline'].min():g}: batch {int(wins.iloc[0]['small_batch'])} on {int(wins.iloc[0]['small_gpus'])} vs {int(wins.iloc[0]['large_batch'])} on {int(wins.iloc[0]['large_gpus'])} GPUs" if len(wins) else ""),
     "yes" if len(wins) else "no"],
    ["latency-oriented parallelism trades extra GPUs for shorter steps", "yes (projection in the paper too)",
     "projected only (dashed curves above)", "n/a"],
], columns=analyses.CLAIM_COLUMNS)
study.save_table(claims, "04_claims")
claims"""),
]


NB05 = [
    ("md", """# 05 — Critical batch size: where does "small batch" end?

**Question.** Notebook 02 found the best batch size for a fixed pool. The literature gives three ways
to locate the batch size beyond which more data per step stops paying: McCandlish et al. 2018
(gradient noise scale B_simple = tr(Σ)/|G|², and the steps/examples hyperbola
(S/S_min − 1)(E/E_min − 1) = 1 with B_crit = E_min/S_min); Zhang et al. 2025 (S(B) = a + b/B, critical
where steps exceed linear scaling from the smallest batch by 20%; B* grows with data, ≈ 22.7·D^0.47,
D in millions of tokens); Zhou et al. 2026 (under WSD, E(S) is piecewise, giving B_min — below it a
target is not reached — and B_opt, the fewest tokens). And should the batch change during training?

**Method.** (1) Runs that log B_simple from micro-batch and global-batch gradient norms (each EMA-smoothed
before the ratio). (2) Steps-to-target from notebook 02's sweep on pool 0: for each target loss and
batch size, the fewest steps over the tuned lr / weight decay at which an evaluation first reaches it;
the three fits, with residuals and bootstrap intervals over the points. (3) The same sweep (first weight
decay only) on pools of several sizes: B_crit and B* against pool size D. (4) Batch-size schedules
(notebook 04's runs) against the best fixed batch. Units: batch sizes in sequences of `seq_len`
tokens; S in optimizer steps; E in tokens. Evaluations fall every `eval_every` epochs, so steps-to-target
are measured at that resolution."""),
    ("code", PARAMETERS, "parameters"),
    ("code", SETUP),
    ("code", """import json

from repro import cbs

pools = study.pools()
noise_runs, noise_evals = study.sweep(study.noise_scale_grid())
runs, evals = study.sweep(study.batch_sweep_grid())
runs0 = runs[runs["pool"] == str(pools[0])]
evals0 = evals[evals["run_id"].isin(runs0["run_id"])]
print(f"{len(noise_runs)} noise-scale runs, {len(runs0)} sweep runs on pool 0")"""),
    ("code", """# NBVAL_CHECK_OUTPUT
print(f"noise-scale evaluation points: {len(noise_evals)}, with B_simple: {int(noise_evals['b_simple'].notna().sum())}")"""),
    ("md", "## The gradient noise scale over training"),
    ("code", """fig, ax = plt.subplots()
for _, run in noise_runs.iterrows():
    curve = noise_evals[noise_evals["run_id"] == run["run_id"]].sort_values("tokens")
    ax.plot(curve["tokens"], curve["b_simple"], label=f"batch {run['batch_size']} (micro-batch {run['micro_batch']}), lr {run['lr']:g}", **plots.MEASURED)
ax.set_xlabel("training tokens")
ax.set_ylabel("B_simple (sequences)")
ax.set_title("Gradient noise scale during training")
ax.legend(fontsize=8)
study.save(fig, "05_noise_scale")
trajectory = (noise_evals.merge(noise_runs[["run_id", "batch_size"]], on="run_id")[["batch_size", "epoch", "tokens", "val_loss", "b_simple"]]
              .sort_values(["batch_size", "tokens"]))
pd.concat([t.iloc[[0, len(t) // 2, -1]] for _, t in trajectory.groupby("batch_size")]).round(3)"""),
    ("md", "## Steps and tokens to a target loss, and the three fits"),
    ("code", """# the hardest target: reached by two thirds of the batch sizes; two easier ones above it
hardest = cbs.reachable_target(runs0, evals0, max(3, round(2 * len(P.batch_sizes) / 3)))
first_loss = float(evals0.groupby("run_id")["val_loss"].first().min())
targets = [round(t, 3) for t in np.linspace(hardest, hardest + 0.6 * (first_loss - hardest), 3)]
reach = cbs.steps_to_target(runs0, evals0, targets, seq_len=P.seq_len)
fit_rows, mccandlish = [], {}
limit = 10 * max(P.batch_sizes)  # interval ends beyond 10x the largest batch measured read "unbounded"
for target, part in reach.groupby("target"):
    B, S = part["batch_size"].to_numpy(float), part["steps"].to_numpy(float)
    if len(part) < 3:
        continue
    mc, zh, wsd = cbs.fit_mccandlish(B, S), cbs.fit_zhang(B, S), cbs.fit_wsd(B, S)
    mccandlish[target] = mc
    fit_rows.append({"target": target, "batch sizes": len(part),
                     "B_crit (McCandlish)": mc["B_crit"],
                     "B_crit 90% CI": cbs.describe_interval(cbs.bootstrap(cbs.fit_mccandlish, B, S, "B_crit"), limit),
                     "max |log residual|": float(np.abs(mc["residuals"]).max()),
                     "B* (Zhang)": zh["B_star"], "B* 90% CI": cbs.describe_interval(cbs.bootstrap(cbs.fit_zhang, B, S, "B_star"), limit),
                     "max |residual| (steps)": float(np.abs(zh["residuals"]).max()),
                     "B_opt (Zhou)": wsd["B_opt"], "B_opt 90% CI": cbs.describe_interval(cbs.bootstrap(cbs.fit_wsd, B, S, "B_opt"), limit),
                     "B_min (Zhou)": wsd["B_min"],
                     # tokens to target tie at epoch resolution: every batch at the minimum
                     "fewest tokens at batch": ", ".join(str(b) for b in part.loc[part["tokens"] == part["tokens"].min(), "batch_size"])})
fits = pd.DataFrame(fit_rows)
fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(10, 3.8))
grid_b = np.geomspace(min(P.batch_sizes), max(P.batch_sizes), 50)
for target, part in reach.groupby("target"):
    line = ax_s.plot(part["batch_size"], part["steps"], label=f"target {target}", **plots.MEASURED)[0]
    if target in mccandlish:
        mc = mccandlish[target]
        ax_s.plot(grid_b, mc["S_min"] + mc["E_min"] / grid_b, color=line.get_color(), **plots.PROJECTED)
    ax_e.plot(part["steps"], part["tokens"], label=f"target {target}", **plots.MEASURED)
for ax in (ax_s, ax_e):
    ax.set_xscale("log")
    ax.set_yscale("log")
ax_s.set_xlabel("batch size (sequences)")
ax_s.set_ylabel("steps to target")
ax_s.set_title("S(B); dashed: McCandlish fit")
ax_e.set_xlabel("steps to target")
ax_e.set_ylabel("tokens to target")
ax_e.set_title("E(S) (one point per batch size)")
ax_s.legend(fontsize=8)
study.save(fig, "05_steps_tokens_to_target")
fits.round(3)"""),
    ("code", """# NBVAL_CHECK_OUTPUT
print(f"{len(targets)} targets, {len(fits)} fitted")"""),
    ("md", """## Critical batch size vs pool size

The batch sweep (first weight decay, lr tuned) on pools of several sizes that share the tokenizer and
validation documents. The target per pool is the lowest loss two thirds of the batch sizes reach on
that pool, so each pool is judged at its own attainable loss."""),
    ("code", """sized = study.sized_pools()
scale_runs, scale_evals = study.sweep(study.scaling_grid())
scale_rows = []
for pool in sized:
    mine = scale_runs[scale_runs["pool"] == str(pool)]
    mine_evals = scale_evals[scale_evals["run_id"].isin(mine["run_id"])]
    target = cbs.reachable_target(mine, mine_evals, max(3, round(2 * len(P.batch_sizes) / 3)))
    part = cbs.steps_to_target(mine, mine_evals, [target], seq_len=P.seq_len)
    B, S = part["batch_size"].to_numpy(float), part["steps"].to_numpy(float)
    tokens = json.loads((pool / "meta.json").read_text())["splits"]["train"]["tokens"]
    scale_rows.append({"pool tokens": tokens, "target": target, "batch sizes": len(part),
                       "B_crit": cbs.fit_mccandlish(B, S)["B_crit"] if len(part) >= 3 else np.nan,
                       "B*": cbs.fit_zhang(B, S)["B_star"] if len(part) >= 3 else np.nan})
scaling = pd.DataFrame(scale_rows)
D = scaling["pool tokens"] / 1e6
law = {name: cbs.power_law(D, scaling[name]) for name in ("B_crit", "B*")} if scaling[["B_crit", "B*"]].notna().all().all() else {}
fig, ax = plt.subplots()
for name in ("B_crit", "B*"):
    ax.plot(scaling["pool tokens"], scaling[name], label=name + (f" ~ D^{law[name]['alpha']:.2f}" if law else ""), **plots.MEASURED)[0]
d_grid = np.geomspace(D.min(), D.max(), 20)
ax.plot(d_grid * 1e6, 22.7 * d_grid**0.47, label="Zhang et al.: 22.7 D^0.47 (their scale; compare slopes)", **plots.PROJECTED)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("pool size D (training tokens)")
ax.set_ylabel("critical batch size (sequences)")
ax.set_title("Critical batch size vs data size")
ax.legend(fontsize=8)
study.save(fig, "05_cbs_vs_pool_size")
scaling.round(3)"""),
    ("md", """## Batch-size schedules vs the best fixed batch

Notebook 04's schedule runs (lr grid of batch `schedule_batch`, lr x sqrt(B / schedule_batch) as the
batch changes) against notebook 02's best fixed batch on the same pool."""),
    ("code", """schedule_runs, schedule_evals = study.sweep(study.schedule_grid())
fixed_best = runs0.loc[runs0["best_val_loss"].idxmin()]
best_runs = [(f"fixed batch {int(fixed_best['batch_size'])}", fixed_best, evals0)]
for name, schedule in P.batch_schedules.items():
    mine = schedule_runs[schedule_runs["batch_schedule"] == schedule]
    best_runs.append((f"{name} ({schedule})", mine.loc[mine["best_val_loss"].idxmin()], schedule_evals))
schedules = pd.DataFrame([{"policy": label, "best val loss": run["best_val_loss"], "lr": run["lr"], "best epoch": run["best_epoch"]}
                          for label, run, _ in best_runs])
fig, ax = plt.subplots()
for label, run, source in best_runs:
    curve = source[source["run_id"] == run["run_id"]]
    ax.plot(curve["tokens"], curve["val_loss"], label=label, **plots.MEASURED)
ax.set_xlabel("training tokens")
ax.set_ylabel("validation loss (nats/token)")
ax.set_title("Schedules vs the best fixed batch (best lr each)")
ax.legend(fontsize=8)
study.save(fig, "05_schedules")
schedules.round(4)"""),
    ("md", "## Claims vs measurement"),
    ("code", """ALPHA_TOLERANCE = 0.25  # the D^0.47 claim agrees when the fitted exponent is this close (3 pools: a coarse test)
middle = fits.iloc[len(fits) // 2] if len(fits) else None
first_b, last_b = (trajectory.groupby("batch_size")["b_simple"].first(), trajectory.groupby("batch_size")["b_simple"].last())
best_schedule = schedules.iloc[1:]["best val loss"].min()
claims = pd.DataFrame([
    ["the gradient noise scale grows as the loss falls (McCandlish et al.)", "yes",
     "; ".join(f"batch {b}: B_simple {first_b[b]:.1f} -> {last_b[b]:.1f}" for b in first_b.index),
     "yes" if (last_b > first_b).all() else "no"],
    ["steps fall ~1/B below B_crit and level off above it (S = S_min + E_min/B)", "yes",
     "no fit" if middle is None else f"target {middle['target']}: B_crit {middle['B_crit (McCandlish)']:.1f} "
     f"(90% CI {middle['B_crit 90% CI']}), max |log residual| {middle['max |log residual|']:.2f}",
     "n/a" if middle is None else ("yes" if middle["max |log residual|"] < 0.3 else "no (poor fit)")],
    ["critical batch size (20% over linear scaling) B* grows with data size as D^0.47 (Zhang et al.)", "alpha = 0.47",
     f"alpha = {law['B*']['alpha']:.2f} (B_crit: {law['B_crit']['alpha']:.2f}) over {len(scaling)} pools of "
     f"{', '.join(f'{t:,}' for t in scaling['pool tokens'])} tokens" if law else "not fitted",
     "n/a" if not law else "no (B* does not grow)" if law["B*"]["alpha"] <= 0 else
     "yes" if abs(law["B*"]["alpha"] - 0.47) <= ALPHA_TOLERANCE else
     f"partly (B* grows, but as D^{law['B*']['alpha']:.2f}: more than {ALPHA_TOLERANCE} from 0.47)"],
    ["a minimum batch B_min and a token-optimal batch B_opt exist (Zhou et al., WSD)", "yes (WSD)",
     "no fit" if middle is None else f"B_opt {middle['B_opt (Zhou)']:.1f}, B_min {middle['B_min (Zhou)']:.2f}; fewest tokens at batch "
     f"{middle['fewest tokens at batch']} (cosine schedule here, not WSD)",
     "n/a" if middle is None else ("yes" if np.isfinite(middle["B_opt (Zhou)"]) and middle["B_min (Zhou)"] >= min(P.batch_sizes)
                                   else "partly (B_opt only; every batch reaches the target)" if np.isfinite(middle["B_opt (Zhou)"])
                                   else "no (no interior token minimum)")],
    ["a batch-size schedule beats the best fixed batch (Zhou et al.: ramp-up)", "yes",
     f"best schedule {best_schedule:.4f} vs fixed {schedules.iloc[0]['best val loss']:.4f} nats",
     "yes" if best_schedule < schedules.iloc[0]["best val loss"] else "no"],
], columns=analyses.CLAIM_COLUMNS)
study.save_table(claims, "05_claims")
claims"""),
]

def checked_outputs(executed: Path) -> dict[str, list]:
    """Outputs of the NBVAL_CHECK_OUTPUT cells of an executed notebook, keyed by cell source."""
    if not executed.exists():
        return {}
    nb = nbformat.read(executed, as_version=4)
    return {c.source: c.outputs for c in nb.cells if c.cell_type == "code" and c.source.startswith("# NBVAL_CHECK_OUTPUT")}


if __name__ == "__main__":
    folder = Path(__file__).resolve().parent.parent / "notebooks"
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else folder  # default: keep the outputs already stored
    for name, cells in (("01_data_pool", NB01), ("02_batch_sweep", NB02), ("03_recipe_ablations", NB03), ("04_gpu_time_frontier", NB04),
                        ("05_critical_batch_size", NB05)):
        nb = notebook(cells)
        outputs = checked_outputs(source / f"{name}.ipynb")
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.source in outputs:
                cell.outputs = outputs[cell.source]
                cell.execution_count = 1
        nbformat.write(nb, folder / f"{name}.ipynb")
