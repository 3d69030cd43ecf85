"""The analyzer contract and registry."""
