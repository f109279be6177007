# %% [markdown]
# # 05 — Critical batch size: where does "small batch" end?
#
# **Question.** Notebook 02 found the best batch size for a fixed pool. The literature gives three ways
# to locate the batch size beyond which more data per step stops paying: McCandlish et al. 2018
# (gradient noise scale B_simple = tr(Σ)/|G|², and the steps/examples hyperbola
# (S/S_min − 1)(E/E_min − 1) = 1 with B_crit = E_min/S_min); Zhang et al. 2025 (S(B) = a + b/B, critical
# where steps exceed linear scaling from the smallest batch by 20%; B* grows with data, ≈ 22.7·D^0.47,
# D in millions of tokens); Zhou et al. 2026 (under WSD, E(S) is piecewise, giving B_min — below it a
# target is not reached — and B_opt, the fewest tokens). And should the batch change during training?
#
# **Method.** (1) Runs that log B_simple from micro-batch and global-batch gradient norms (each EMA-smoothed
# before the ratio). (2) Steps-to-target from notebook 02's sweep on pool 0: for each target loss and
# batch size, the fewest steps over the tuned lr / weight decay at which an evaluation first reaches it;
# the three fits, with residuals and bootstrap intervals over the points. (3) The same sweep (first weight
# decay only) on pools of several sizes: B_crit and B* against pool size D. (4) Batch-size schedules
# (notebook 04's runs) against the best fixed batch. Units: batch sizes in sequences of `seq_len`
# tokens; S in optimizer steps; E in tokens. Evaluations fall every `eval_every` epochs, so steps-to-target
# are measured at that resolution.

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
import json

from repro import cbs

pools = study.pools()
noise_runs, noise_evals = study.sweep(study.noise_scale_grid())
runs, evals = study.sweep(study.batch_sweep_grid())
runs0 = runs[runs["pool"] == str(pools[0])]
evals0 = evals[evals["run_id"].isin(runs0["run_id"])]
print(f"{len(noise_runs)} noise-scale runs, {len(runs0)} sweep runs on pool 0")

# %%
print(f"noise-scale evaluation points: {len(noise_evals)}, with B_simple: {int(noise_evals['b_simple'].notna().sum())}")

# %% [markdown]
# ## The gradient noise scale over training

# %%
fig, ax = plt.subplots()
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
pd.concat([t.iloc[[0, len(t) // 2, -1]] for _, t in trajectory.groupby("batch_size")]).round(3)

# %% [markdown]
# ## Steps and tokens to a target loss, and the three fits

# %%
# the hardest target: reached by two thirds of the batch sizes; two easier ones above it
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
fits.round(3)

# %%
print(f"{len(targets)} targets, {len(fits)} fitted")

# %% [markdown]
# ## Critical batch size vs pool size
#
# The batch sweep (first weight decay, lr tuned) on pools of several sizes that share the tokenizer and
# validation documents. The target per pool is the lowest loss two thirds of the batch sizes reach on
# that pool, so each pool is judged at its own attainable loss.

# %%
sized = study.sized_pools()
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
scaling.round(3)

# %% [markdown]
# ## Batch-size schedules vs the best fixed batch
#
# Notebook 04's schedule runs (lr grid of batch `schedule_batch`, lr x sqrt(B / schedule_batch) as the
# batch changes) against notebook 02's best fixed batch on the same pool.

# %%
schedule_runs, schedule_evals = study.sweep(study.schedule_grid())
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
schedules.round(4)

# %% [markdown]
# ## Claims vs measurement

# %%
ALPHA_TOLERANCE = 0.25  # the D^0.47 claim agrees when the fitted exponent is this close (3 pools: a coarse test)
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
claims
