"""Error-based predictive coding (issue 32): the digits testbed, the reproduction ``epc-depth`` and the benchmark ``epc-throughput``."""
