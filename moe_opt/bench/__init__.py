"""H200 microbenchmarks, tuning and the recompilation study for `moe_opt.kernels` (they write files)."""
