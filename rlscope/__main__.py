"""``python -m rlscope`` runs the command line."""

from rlscope.cli import run

run()
