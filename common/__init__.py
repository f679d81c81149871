"""Infrastructure every package shares, with no dependency on Ray, vLLM or torch: one implementation each."""
