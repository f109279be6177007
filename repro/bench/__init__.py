"""Benchmarks (`repro bench`): measurements side by side in one run (measure), peer
implementations to compare against (peers), and the command line's handlers (cli)."""
