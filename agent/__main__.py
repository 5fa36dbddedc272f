"""`python -m agent`: run the node agent (see `python -m agent --help`)."""

from .cli import main

main()
