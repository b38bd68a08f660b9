"""The review store's revisions, oldest first: ``0001`` is the first store's schema."""
