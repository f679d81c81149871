"""A/B statistics, verdicts, reports and the nightly gate, computed from saved result files only.

This package never imports ``cluster`` or Ray: it reads ``result_format.run_result.RunResult`` files, so a
report can be rebuilt anywhere a result file can be copied to.
"""
