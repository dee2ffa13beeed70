"""`python -m conch.apps.cli`."""

from conch.apps.cli import main

main()
