"""A script for tests/test_command.py that goes wrong in the way its first argument names.

* ``nan``: reports ``{"loss": 1.0}``, then ``{"loss": NaN}``, then waits to be ended.
* ``exit1``: prints a marker on stdout, reports once, writes 30 numbered lines to stderr
  (``t1 stderr line 01`` ... ``30``), then ``ValueError: t1 went wrong``, and exits 1.
* ``hang``: reports once, then never exits (until it is ended).
"""

import json
import signal
import sys


def main() -> int:
    mode = sys.argv[1]
    print("T1-STDOUT-MARKER should stay in the trial's folder", flush=True)
    print(json.dumps({"loss": 1.0}), flush=True)
    if mode == "nan":
        print('{"loss": NaN}', flush=True)
    elif mode == "exit1":
        for i in range(1, 31):
            print(f"t1 stderr line {i:02d}", file=sys.stderr)
        print("ValueError: t1 went wrong", file=sys.stderr, flush=True)
        return 1
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
