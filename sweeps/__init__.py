"""Many training runs, and comparing them fairly.

    runner        `make sweep`: notebook 04 once per combination of a grid (default.toml)
    runs          read run folders as they are, whichever notebook version wrote them
    compare       held-out gains with 95% intervals, differing settings, seed spread
    notebook_runs a notebook under papermill, and the local stack its kernels share

Notebook 06 teaches with `runs` and `compare`; `make run` uses `runner` for its tiny sweep.
"""
