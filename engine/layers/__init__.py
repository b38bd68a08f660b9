"""Building blocks of the engine's models: attention on paged KV, rotary embeddings, sampling."""
