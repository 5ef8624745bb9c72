"""The analysis contract: what an analyzer is, returns and splits into, the registry, and how
the findings of every analyzer settle into one per cause."""
