"""``python -m fabricwatch``."""

import sys

from fabricwatch.cli import main

sys.exit(main())
