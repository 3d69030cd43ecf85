"""Built-in analyzers, registered through the interpret.analyzers entry points."""
