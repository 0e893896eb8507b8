"""`python -m cordstream.shell.cli`: the `cordstream` command."""

import sys

from cordstream.shell.cli import main

sys.exit(main())
