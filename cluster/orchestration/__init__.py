"""Orchestration: the run driver, one arm's life cycle and the client actors that replay the schedule."""
