import sys

from sits.cli import main

if __name__ == "__main__":  # spawned worker processes import this module; only a real run starts the CLI
    sys.exit(main())
