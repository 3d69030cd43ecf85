"""Model loading: `load`, the built-in default model and its sentiment head."""
