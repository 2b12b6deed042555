"""`python -m guardsolve` runs the command line."""

from guardsolve.cli import console

console()
