"""The tools that compile, upload, submit and run the pipelines (``make compile``, ``upload``,
``submit``, ``run``, ``sweep``), apart from the pipeline definitions in ``pipelines/``.
"""
