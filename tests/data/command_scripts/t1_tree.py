"""A script for tests/test_command.py that starts a child and reports until it is ended.

Its first argument: ``plain`` (the child stays in the script's process group), ``setsid`` (the
child calls ``os.setsid()``, leaving the group) or ``ignore`` (script and child ignore SIGTERM).
Writes its own pid to $TUNER_TRIAL_DIR/t1_script.pid and the child's to t1_child.pid (once the
child runs), then reports ``{"step": N}`` twice and waits; a trial that ``stop`` ends at
training_iteration 2 never lets it exit by itself.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

CHILD = """
import os, signal, sys
from pathlib import Path
if sys.argv[1] == "setsid":
    os.setsid()
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(os.getpid(), flush=True)
while True:
    signal.pause()
"""


def main() -> int:
    mode = sys.argv[1]
    if mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    trial_dir = Path(os.environ["TUNER_TRIAL_DIR"])
    (trial_dir / "t1_script.pid").write_text(str(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)
    pid = child.stdout.readline().strip()  # the child runs (and has left the group, for setsid)
    (trial_dir / "t1_child.pid").write_text(pid)
    for step in (1, 2):
        print(json.dumps({"step": step}), flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
