"""``python -m simfuse.cli ...`` (same as the ``simfuse`` command)."""

import sys

from . import main

sys.exit(main())
