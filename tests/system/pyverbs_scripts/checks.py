"""What the pyverbs scripts share: a failed check ends the script with a
message (non-zero exit), and a completion is waited for with a bound."""

import sys
import os

# pyverbs_enums.py, one folder up: the enumerations of any pyverbs.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyverbs_enums import ce, e  # noqa: E402,F401


def check(condition, what):
    if not condition:
        sys.exit("check failed: " + what)


def poll(cq):
    """The next completion of `cq`; the script fails when none comes."""
    for _ in range(2_000_000):
        n, wcs = cq.poll()
        if n:
            return wcs[0]
    sys.exit("no completion")
