"""Building reports: papermill runs each report notebook, nbconvert exports it, and an index page links them."""
