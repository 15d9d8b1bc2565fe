"""`python -m fibril_mjx.cli ...` = `fibril-mjx ...`."""

import sys

from fibril_mjx.cli import main

sys.exit(main())
