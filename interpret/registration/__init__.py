"""Plugin entry points and the analyzer contract's rules, read without torch."""
