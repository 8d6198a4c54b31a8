"""``python -m actorwire``: the same command line as the ``actorwire`` script."""

from __future__ import annotations

import os
import sys

# ``python -m`` put the current directory first on sys.path: a recording's directory (or any
# other) must not be able to shadow a module by holding a .py of that name.
if not getattr(sys.flags, "safe_path", False) and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from actorwire.actors.cli._main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
