"""Benchmarks from the field, one module each; every loader returns a :class:`perbench.data.Benchmark`.

* :mod:`.prb` -- Personalized RewardBench (``load_prb``)
* :mod:`.pref_lamp` -- Pref-LaMP's recipe from LaMP-5 with a given encoder (``build_pref_lamp``; the loader by
  encoder name with the Table-1 check, ``load_pref_lamp``, is :mod:`perbench.builders.pref_lamp`); its parts:
  :mod:`.lamp5` (the LaMP-5 files), :mod:`.pref_lamp_negatives` (hard-negative mining)
* :mod:`.prism` -- PRISM with LoRe's split (``load_prism``)
* :mod:`.tldr` -- Personalized TL;DR, PAL and LoRe protocols (``load_tldr``)
* :mod:`.persona` -- persona-style and domain-style rows (``load_persona``, ``load_domain_styles``)

Importing this package imports nothing heavy; each module imports torch/datasets only when it needs them.
See ``docs/benchmarks-data.md`` for where to get the real data and the choices we made.
"""
