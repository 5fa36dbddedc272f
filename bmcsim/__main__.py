"""`python -m bmcsim`: run the simulated fleet (see `python -m bmcsim --help`)."""

from .server import run
from .settings import parse

run(parse())
