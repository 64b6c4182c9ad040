"""The reports: parameterized notebooks rendered to self-contained HTML.

``trainperf report`` (:mod:`trainperf.report.cli`) runs the notebooks in
``notebooks/`` with papermill and exports them with nbconvert
(:mod:`~trainperf.report.pipeline`). The notebooks call this package for
everything they show: :mod:`~trainperf.report.page` (inputs, header, data
quality), one module per report (:mod:`~trainperf.report.throughput`,
:mod:`~trainperf.report.scaling`, :mod:`~trainperf.report.batch_size`,
:mod:`~trainperf.report.platforms`), built from :mod:`~trainperf.report.html`
(escaped tables and text) and :mod:`~trainperf.report.plots` (figures).
"""
