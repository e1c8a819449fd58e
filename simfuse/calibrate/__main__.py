"""``python -m simfuse.calibrate calibrate|validate ...`` (same as ``simfuse calibrate|validate``)."""

import sys

from ..cli.calibrate import main

sys.exit(main())
