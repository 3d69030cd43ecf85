"""The decision step: which output is explained (`decide`), labels as classes, generation."""
