"""The ``moeperf`` command line: options generated from the config model, wired to the other packages."""
