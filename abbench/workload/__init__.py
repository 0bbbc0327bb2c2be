"""Requests to a server: the one HTTP client, exact-length prompts, decodes, side calls."""
