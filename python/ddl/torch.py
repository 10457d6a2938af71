"""ddl.torch: PyTorch integration (filled in below)."""
