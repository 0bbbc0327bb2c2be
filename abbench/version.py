"""abbench's version, kept apart so that any layer can name it."""

__version__ = "0.1.0"
