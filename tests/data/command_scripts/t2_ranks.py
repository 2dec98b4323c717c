"""A script for tests/test_command_resume.py run under torchrun (``resources.workers``): no torch import.

``t2_ranks.py EPOCHS``: every rank prints ``{"step": N, "rank": RANK, "world_size": WORLD_SIZE}``
for N = 1..EPOCHS on stdout (torchrun's environment; rank 0 and world size 1 without it), and
``t2 rank RANK`` on stderr; only rank 0's lines may count as reports.
"""

import json
import os
import sys


def main() -> int:
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    print(f"t2 rank {rank}", file=sys.stderr, flush=True)
    for step in range(1, int(sys.argv[1]) + 1):
        print(json.dumps({"step": step, "rank": rank, "world_size": world}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
