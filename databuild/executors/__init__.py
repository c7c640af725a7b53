"""Who runs the pure encode step besides the local processes: Ray."""
