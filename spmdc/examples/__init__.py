"""Built-in workloads and example IR programs."""
