"""`python -m conch.cli`."""

from conch.cli import main

main()
