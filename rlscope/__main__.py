"""``python -m rlscope`` runs the command line."""

import sys

from rlscope.cli import main

sys.exit(main())
