"""Head importance, pruning curves and weight surgery (Michel, Levy and Neubig 2019)."""
