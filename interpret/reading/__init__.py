"""Inputs: reading examples from files, and text as the toolkit measures and prints it."""
