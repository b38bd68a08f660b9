"""The benchmarks: scripts run as ``python benchmarks/NAME.py`` (see docs/benchmarks.md), and the
code they share that the product does not run (``benchmarks.research``)."""
