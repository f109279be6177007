"""What the trainer runs: the run config, the model, optimizer and schedules, epoch loaders,
stacked training, the gradient noise scale, and one training run (train). Nothing here imports
the analysis code (repro.analysis) or pandas / scipy."""
