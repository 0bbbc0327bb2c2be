"""Quality: suite checks, greedy-output fingerprints."""
