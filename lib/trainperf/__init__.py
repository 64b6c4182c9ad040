"""trainperf: measure how fast deep-learning training runs and how well it scales."""

from trainperf.errors import DataError, DataWarning

__version__ = "0.1.0"

__all__ = ["DataError", "DataWarning", "__version__"]
