"""cordstream: stream a language model's answer into a Discord channel.

The library is `cordstream.domain` (the pure core) and `cordstream.shell` (the async layer
over discord.py). This package itself holds only the version, so that `import cordstream`
costs nothing and loads no discord.py, and the `cordstream` command's entry point
(`cordstream.__main__`, also `python -m cordstream`).
"""

# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"

import logging as _logging

# Silent until the application configures logging (SPEC M1): `cordstream` and its children
# (`cordstream.stream`, `.discord`, `.provider`, `.turn`, `.bot`) log through the standard library.
_logging.getLogger("cordstream").addHandler(_logging.NullHandler())
