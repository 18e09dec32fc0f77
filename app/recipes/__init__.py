"""The model workflows that score through the pipeline (so they live in ``app``): training
the shapes detector (``train.py``), scoring on labelled clips (``evaluate.py``), pruning and
INT8 with a loss gate (``optimize.py``), the pipeline against the reference path
(``check.py``), tracking scored (``track_eval.py``). ``app.cli.model`` is their face."""
