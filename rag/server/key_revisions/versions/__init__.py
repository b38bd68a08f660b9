"""The key store's revisions, oldest first."""
