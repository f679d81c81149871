"""Engine process: one vLLM server per arm, its command line, its start-up log and its counters."""
