"""The arms file: typed, frozen models, YAML loading with line maps, checks, presets."""
