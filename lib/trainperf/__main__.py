"""``python -m trainperf``."""

from trainperf.cli import main

raise SystemExit(main())
