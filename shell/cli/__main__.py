"""`python -m cordstream.shell.cli`: the `cordstream` command (`python -m cordstream` is the
same, and answers a Ctrl-C while the library loads too)."""

import sys

from cordstream.__main__ import main

sys.exit(main())
