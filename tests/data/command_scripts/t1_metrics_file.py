"""A script for tests/test_command.py that appends its metrics to $TUNER_METRICS_FILE (JSON lines).

It records its argv (JSON) in $TUNER_TRIAL_DIR/t1_argv.json and a copy of the YAML file that
$TUNER_CONFIG names in $TUNER_TRIAL_DIR/t1_config_seen.yaml, and prints a decoy JSON line on stdout
(``{"score": -1}``), which must not count: with ``metrics: FILE`` stdout holds no metrics.

score = 10 * epoch (+ 1 when --momentum is given).
"""

import json
import os
import shutil
import sys
from pathlib import Path


def main() -> int:
    trial_dir = Path(os.environ["TUNER_TRIAL_DIR"])
    Path(trial_dir, "t1_argv.json").write_text(json.dumps(sys.argv[1:]))
    shutil.copy(os.environ["TUNER_CONFIG"], trial_dir / "t1_config_seen.yaml")
    bonus = 1 if "--momentum" in sys.argv else 0
    print(json.dumps({"score": -1}), flush=True)
    with open(os.environ["TUNER_METRICS_FILE"], "a") as f:
        for epoch in (1, 2):
            f.write(json.dumps({"epoch": epoch, "score": 10 * epoch + bonus}) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
