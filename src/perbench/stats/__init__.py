"""Resampling and interval statistics shared by every room that reports a CI (numpy only): the two-way bootstrap
(:mod:`.bootstrap`), training seeds resampled on top of it (:mod:`.seeded`) and the interval helpers
(:mod:`.intervals`). At the base of the pipeline, so Best-of-N curves, RL evaluations and the metrics all read the
same code."""
