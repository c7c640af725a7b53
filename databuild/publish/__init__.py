"""Publishing a build: manifests, atomic replacement, recipe write-back."""
