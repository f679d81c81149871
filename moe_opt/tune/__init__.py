"""``moeperf tune``: tune vLLM's own Triton fused-MoE kernel for one MoE shape and write vLLM's config files.

Modules, one job each: ``folder`` (what a tuned-config folder must hold; standard library only, so the driver
can check an experiment's ``tuned_config_dir`` without torch), ``shape`` (the MoE shape from options or an HF
config.json), ``candidates`` (the tile space), ``vllm_path`` (vLLM's kernel path and lookups, imported from
the installed vLLM), ``timing`` (CUDA-graph timing of one config), ``select`` (winners from timings, timing
injected), ``output`` (vLLM's JSON file and the log), ``cli`` (``main(argv) -> int``).
"""
