"""mypy against a baseline that may only shrink.

The baseline (.ci/mypy-baseline.txt) counts mypy's errors per file.  A file
with more errors than its count, or a file that is not listed and has
errors, fails the check; a file with fewer prints a reminder to lower its
count (run with --update to rewrite the baseline after fixing errors).
"""

from __future__ import annotations

import collections
import pathlib
import subprocess
import sys

BASELINE = pathlib.Path(__file__).with_name("mypy-baseline.txt")


def counts() -> collections.Counter[str]:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "actors", "transport", "messages"],
                          capture_output=True, text=True)
    found: collections.Counter[str] = collections.Counter()
    for line in proc.stdout.splitlines():
        path, sep, rest = line.partition(":")
        if sep and ": error:" in line:
            found[path] += 1
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not found):
        sys.exit(f"mypy failed to run:\n{proc.stdout}{proc.stderr}")
    return found


def main() -> int:
    found = counts()
    if sys.argv[1:] == ["--update"]:
        BASELINE.write_text("".join(f"{path} {n}\n" for path, n in sorted(found.items())))
        print(f"baseline: {sum(found.values())} errors in {len(found)} files")
        return 0
    allowed = {path: int(n) for path, n in (line.split() for line in BASELINE.read_text().splitlines() if line)}
    worse = [f"{path}: {n} mypy errors, the baseline allows {allowed.get(path, 0)}"
             for path, n in sorted(found.items()) if n > allowed.get(path, 0)]
    better = [path for path, n in allowed.items() if found.get(path, 0) < n]
    for line in worse:
        print(line)
    if better:
        print(f"mypy: fewer errors than the baseline in {', '.join(better)}; run "
              f"`python .ci/typecheck.py --update` to lock that in")
    print(f"mypy: {sum(found.values())} errors, baseline {sum(allowed.values())}")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
