"""Benchmarks that a model builds (``perbench build``): the data room holds their recipes, this room runs the
models they need.

* :mod:`.rubric_pool` -- the rubric benchmark's candidate pool, its base responses written by the policy;
* :mod:`.pref_lamp` -- Pref-LaMP (``load_pref_lamp``, registry ``pref_lamp``), its hard negatives mined with a
  named sentence encoder, and :mod:`.pref_lamp_table1`, its Table-1 similarity check (ROUGE, BERTScore).
"""
