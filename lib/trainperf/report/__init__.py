"""The reports: parameterized notebooks (``notebooks/``) run by papermill and exported to self-contained HTML
(:mod:`~trainperf.report.build.pipeline`). One module per report returns tidy DataFrames and short sentences;
:mod:`~trainperf.report.page` opens the inputs and gives the data-quality frames; the notebooks present them with
seaborn and pandas ``Styler`` in the style of :mod:`~trainperf.report.theme`."""
