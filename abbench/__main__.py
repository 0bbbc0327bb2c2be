"""``python -m abbench``."""

from abbench.cli import main

main()
