"""Evaluation on labelled data: dataset loaders and the metrics the benchmarks report."""
