"""A Katib-style training script for tests/test_command.py: ``name=value`` lines on stdout.

Each epoch prints a line without the tuned metric first (``Epoch N: loss=...``, which the merge
rule adds to the next report), then ``epoch=N accuracy=A checkpoint=1``, having saved its epoch
and rank into $TUNER_CHECKPOINT_DIR. With $TUNER_RESTORE_DIR set it goes on after the epoch saved
there. Each start appends its first epoch to $T1_SHARED/starts_<trial id>.txt, a record kept outside
the experiment.

The rank: 0 for the first trial to start, 1 for the next, ... (a file made in $T1_SHARED), so
that accuracy = 0.9 - 0.1 * rank + lr * epoch (lr below 0.03) ranks the trials by their start.

``checkpoint=1`` marks the whole $TUNER_CHECKPOINT_DIR, which tuner copies when it reads the line. Before
it overwrites the folder for the next epoch the script waits for Ray's copy of it (``epoch.txt`` holding
this epoch in a checkpoint folder of the trial's folder, $T1_EXPERIMENT/*_<trial id>/checkpoint_*), so
that the checkpoint of each report holds that report's epoch however the reading and Ray's copy go.
"""

import argparse
import os
import sys
import time
from pathlib import Path

WAIT_S = 120


def rank(shared: Path) -> int:
    for r in range(100):
        try:
            os.close(os.open(shared / f"rank_{r}", os.O_CREAT | os.O_EXCL))
            return r
        except FileExistsError:
            continue
    raise RuntimeError("no rank left")


def copied(epoch: int) -> bool:
    folders = Path(os.environ["T1_EXPERIMENT"]).glob(f"*_{os.environ['TUNER_TRIAL_ID']}/checkpoint_*")
    for folder in folders:
        try:
            if (folder / "epoch.txt").read_text() == str(epoch):
                return True
        except OSError:
            continue
    return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    args = parser.parse_args()
    checkpoint = Path(os.environ["TUNER_CHECKPOINT_DIR"])
    restore = os.environ.get("TUNER_RESTORE_DIR")
    if restore:
        start = int(Path(restore, "epoch.txt").read_text()) + 1
        my_rank = int(Path(restore, "rank.txt").read_text())
    else:
        start, my_rank = 1, rank(Path(os.environ["T1_SHARED"]))
    with open(Path(os.environ["T1_SHARED"], f"starts_{os.environ['TUNER_TRIAL_ID']}.txt"), "a") as f:
        f.write(f"{start}\n")
    for epoch in range(start, args.epochs + 1):
        print(f"Epoch {epoch}: loss={1.0 / epoch:.4f}", flush=True)
        (checkpoint / "rank.txt").write_text(str(my_rank))
        (checkpoint / "epoch.txt").write_text(str(epoch))
        print(f"epoch={epoch} rank={my_rank} accuracy={0.9 - 0.1 * my_rank + args.lr * epoch:.6f} checkpoint=1",
              flush=True)
        deadline = time.monotonic() + WAIT_S
        while not copied(epoch):
            if time.monotonic() > deadline:
                print(f"no copy of epoch {epoch}'s checkpoint after {WAIT_S} s", file=sys.stderr)
                return 3
            time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
