"""``python -m actorwire``: the same command line as the ``actorwire`` script."""

from __future__ import annotations

import sys

from actorwire.actors.cli._main import main

if __name__ == "__main__":
    sys.exit(main())
