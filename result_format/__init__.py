"""The result file format: what the run driver writes and what reports, nightly and tables read."""
