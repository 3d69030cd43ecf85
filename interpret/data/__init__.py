"""Data the package ships: the labelled sentences of the default sentiment head."""
