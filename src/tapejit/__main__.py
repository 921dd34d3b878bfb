"""`python -m tapejit`: the command line (tools/cli.py)."""
import sys

from .tools.cli import main

sys.exit(main())
