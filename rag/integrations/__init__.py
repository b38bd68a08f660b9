"""Adapters between ragguard and other frameworks (``llama_index``)."""
