"""Server processes: build, start, readiness, stop."""
