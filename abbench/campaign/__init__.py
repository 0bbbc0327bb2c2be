"""The campaign: the runner that drives every stage."""
