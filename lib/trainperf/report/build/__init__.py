"""Building reports: papermill runs each report notebook, nbconvert exports it, and an index page links them."""

REPORTS: tuple[str, ...] = ("throughput", "scaling", "batch_size", "platforms", "compare")
"""The reports, in the order the index lists them (each one notebook of ``notebooks/``)."""
