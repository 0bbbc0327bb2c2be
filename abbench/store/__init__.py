"""Storage: run folders (append-and-flush samples) and the SQLite index over them."""
