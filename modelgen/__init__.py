"""Model writer: generated MoE models with dummy weights (any depth) for CPU tests and GPU studies."""
