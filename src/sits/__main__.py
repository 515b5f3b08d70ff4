import sys

from sits.cli import main

sys.exit(main())
