"""A script for tests/test_command.py that writes its arguments out, one a line.

An argument ``err:TEXT`` goes to stderr as ``TEXT``; ``exit:N`` exits with code N at once;
any other argument is a line of stdout.
"""

import sys


def main() -> int:
    for arg in sys.argv[1:]:
        if arg.startswith("exit:"):
            sys.stdout.flush()
            sys.stderr.flush()
            return int(arg[5:])
        if arg.startswith("err:"):
            print(arg[4:], file=sys.stderr, flush=True)
        else:
            print(arg, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
