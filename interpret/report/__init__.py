"""Reports: model, rendering, templates."""
