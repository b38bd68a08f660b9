"""What only the benchmarks use: the guards measured on built and labelled sets (HaluEval pairs,
the MetaQA knowledge-graph harness, repetition loops, end to end with cross-fitting), the
labelled generations as training data for the judgement (``training``), and the records kept
in the repository (``archive``). ``ragguard eval`` runs none of it: that is ``rag.eval``."""
