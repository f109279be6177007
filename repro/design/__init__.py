"""The study's design: presets in typed sections (pools, grid, execution, ...), the built-in presets
as YAML files, the grids each notebook trains, the regime against the paper's ratios, and the dry
run (a preset shrunk to CPU size). Nothing here trains or analyses."""
