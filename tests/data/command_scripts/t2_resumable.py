"""A script for tests/test_command_resume.py that checkpoints every epoch and restores from a checkpoint.

``t2_resumable.py X EPOCHS``: for each epoch from the checkpoint's (0 without one) to EPOCHS, writes
``epoch.txt`` (the epochs done) and ``score.txt`` into $TUNER_CHECKPOINT_DIR and prints a JSON line
with ``"checkpoint": true`` (with $T2_CHECKPOINT=named: into a folder of its own per epoch,
``epoch-N`` inside $TUNER_CHECKPOINT_DIR, named in the line, ``"checkpoint": "epoch-N"``): ``epoch``, ``x``, ``score`` (the checkpoint's score plus X an epoch: a trial
restored from another trial's checkpoint goes on from that trial's score), ``start_epoch`` (the epoch
it started from) and ``restore_dir`` (``$TUNER_RESTORE_DIR``, ``""`` without one).

On each start it appends its pid to $TUNER_TRIAL_DIR/t2_pids.txt, and prints a plain line
``t2 start epoch=N restore=DIR argv=JSON`` (no metrics; DIR is ``-`` without a checkpoint) to
stdout; with $T2_STARTS set (a file path outside the trial folder), it appends a JSON line there
too: ``trial_id`` ($TUNER_TRIAL_ID), ``pid``, ``epoch``, ``restore`` (None without a checkpoint) and
``argv``. With $T2_HOLD set (a file path), a start without a checkpoint waits after its first epoch
until that file exists: a gate the test opens.
"""

import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    x, epochs = float(sys.argv[1]), int(sys.argv[2])
    with open(Path(os.environ["TUNER_TRIAL_DIR"], "t2_pids.txt"), "a") as f:
        f.write(f"{os.getpid()}\n")
    restore = os.environ.get("TUNER_RESTORE_DIR", "")
    start, score = 0, 0.0
    if restore:
        start = int(Path(restore, "epoch.txt").read_text())
        score = float(Path(restore, "score.txt").read_text())
    print(f"t2 start epoch={start} restore={restore or '-'} argv={json.dumps(sys.argv[1:])}", flush=True)
    if os.environ.get("T2_STARTS"):
        with open(os.environ["T2_STARTS"], "a") as f:
            f.write(json.dumps({"trial_id": os.environ["TUNER_TRIAL_ID"], "pid": os.getpid(), "epoch": start,
                                "restore": restore or None, "argv": sys.argv[1:]}) + "\n")
    checkpoint = Path(os.environ["TUNER_CHECKPOINT_DIR"])
    hold = os.environ.get("T2_HOLD")
    named = os.environ.get("T2_CHECKPOINT") == "named"
    for epoch in range(start, epochs):
        score += x
        folder = checkpoint / f"epoch-{epoch + 1}" if named else checkpoint
        folder.mkdir(exist_ok=True)
        (folder / "epoch.txt").write_text(str(epoch + 1))
        (folder / "score.txt").write_text(repr(score))
        print(json.dumps({"epoch": epoch + 1, "x": x, "score": score, "start_epoch": start,
                          "restore_dir": restore, "checkpoint": folder.name if named else True}), flush=True)
        while hold and not restore and not os.path.exists(hold):
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
