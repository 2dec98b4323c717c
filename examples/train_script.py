"""A training script as people write it before any tuner: argparse flags in, one line of metrics
per epoch out. tuner runs it as a command trial (``search_spaces/script_asha.yaml``); it imports
nothing of tuner's and runs by hand too::

    python examples/train_script.py --lr 0.05 --epochs 3

It trains a small MLP on scikit-learn's bundled 8x8 digits (1,797 images: 1,437 to train on,
360 to validate; nothing is downloaded), and:

* prints one JSON object a line on stdout after each epoch (``--metrics-format kv`` prints
  Katib's ``name=value`` pairs instead);
* with ``$TUNER_CHECKPOINT_DIR`` set (tuner sets it), saves its model there every epoch and
  says so in that epoch's line (``"checkpoint": true``); with ``$TUNER_RESTORE_DIR`` set, starts
  from the checkpoint there (a resumed, paused or PBT-cloned trial);
* under ``torchrun`` (``resources.workers``), trains with DistributedDataParallel (gloo on CPU,
  nccl on GPU), each rank on its shard; rank 0 prints and saves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--batch_size", "--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64, help="width of the hidden layer")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metrics-format", choices=("json", "kv"), default="json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # started by torchrun
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train_idx, val_idx = order[:1437], order[1437:]
    train = TensorDataset(x[train_idx], y[train_idx])
    sampler = DistributedSampler(train, shuffle=True, seed=args.seed) if world > 1 else None
    loader = DataLoader(train, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler)
    x_val, y_val = x[val_idx].to(device), y[val_idx].to(device)

    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    start = 0
    restore = os.environ.get("TUNER_RESTORE_DIR")
    if restore and os.path.isfile(os.path.join(restore, "model.pt")):
        state = torch.load(os.path.join(restore, "model.pt"), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    checkpoint_dir = os.environ.get("TUNER_CHECKPOINT_DIR")

    for epoch in range(start, args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xb.to(device)), yb.to(device))
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val)
            val_loss = nn.functional.cross_entropy(logits, y_val).item()
            val_accuracy = (logits.argmax(1) == y_val).float().mean().item()
        if rank != 0:
            continue
        metrics = {"epoch": epoch + 1, "val_loss": round(val_loss, 5), "val_accuracy": round(val_accuracy, 5)}
        if checkpoint_dir:
            plain = model.module if world > 1 else model
            torch.save({"model": plain.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                       os.path.join(checkpoint_dir, "model.pt"))
            metrics["checkpoint"] = True
        if args.metrics_format == "kv":
            print(" ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in metrics.items()), flush=True)
        else:
            print(json.dumps(metrics), flush=True)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
