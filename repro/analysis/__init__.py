"""What the notebooks run on finished runs: results as DataFrames, tuned endpoints, the paper's
claims, critical-batch-size fits, the GPU-time frontier, and the figures in one style."""
