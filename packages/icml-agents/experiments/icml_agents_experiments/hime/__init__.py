"""HiMe (issue 51): the task suite, the agents compared, the reproduction and the benchmark."""
