"""``python -m poetsim`` runs the command-line interface."""

import sys

from poetsim.cli.main import main

sys.exit(main())
