"""databuild: deterministic builder of packed SFT datasets."""
