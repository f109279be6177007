"""Runs on disk and the work that fills them: sweeps (grids, the run store keyed by config hash,
local and Slurm executors), multi-process launches, results bundles, and downstream evaluation of
a finished run."""
