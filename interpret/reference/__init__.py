"""Our readable reference Transformer."""
