"""The reports: parameterized notebooks rendered to self-contained HTML.

``trainperf report`` (:mod:`trainperf.report.cli`) runs the notebooks in
``notebooks/`` with papermill and exports them with nbconvert
(:mod:`~trainperf.report.pipeline`). The library does the analysis: one
module per report (:mod:`~trainperf.report.throughput`,
:mod:`~trainperf.report.scaling`, :mod:`~trainperf.report.batch_size`,
:mod:`~trainperf.report.platforms`) returns tidy DataFrames and short
sentences, :mod:`~trainperf.report.page` opens the inputs and gives the
data-quality frames. The notebooks present them: seaborn charts and pandas
``Styler`` tables in the style of :mod:`~trainperf.report.theme`, text through
:mod:`~trainperf.report.html` (escaped).
"""
