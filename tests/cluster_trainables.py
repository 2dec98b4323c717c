"""Train functions of the cluster tests (tests/test_cluster.py), importable by Ray workers."""

import time
from pathlib import Path

from tests.trainables import _epoch_checkpoint, _start_epoch
from tuner import trial


def held_on_node(config):
    """``tests.trainables.where``, except on the node ``hold_node``, where it stops for good.

    Each epoch reports the node it ran on and writes a checkpoint. On the node whose id is
    ``config["hold_node"]``, once epochs ``0 .. hold_at - 1`` are reported, it writes that
    node id to ``config["hold_file"]`` and waits there (up to 10 minutes, then fails)
    until the test kills the node; restarted elsewhere it goes on from its checkpoint.
    So the trial is mid-way when its node dies, however slow the machine.
    """
    import ray

    node = ray.get_runtime_context().get_node_id()
    start = _start_epoch()
    for epoch in range(start, int(config["epochs"])):
        if node == config["hold_node"] and epoch == config["hold_at"]:
            Path(config["hold_file"]).write_text(node)
            for _ in range(600):
                time.sleep(1)
            raise RuntimeError(f"the node {node} was not killed")
        time.sleep(config.get("sleep", 0.5))
        trial.report({"loss": config["x"] + 1.0 / (epoch + 1), "epoch": epoch, "node": node},
                     checkpoint_dir=_epoch_checkpoint(epoch))
