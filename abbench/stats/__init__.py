"""Statistics: paired intervals and verdicts, McNemar, regression steps, stopping rules."""
