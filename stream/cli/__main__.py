"""``python -m stream.cli``."""

from . import main

main()
