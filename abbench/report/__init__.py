"""The table as data, then its renderers: markdown, JSON, CSV, quality, compare, plan."""
