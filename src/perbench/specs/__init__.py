"""The base the run config stands on, as plain data: config text with its lines (``located``), the value checks
(``values``) and the section specs a config composes -- ``adaptive`` rounds, ``systems`` grids, the ``rl`` phase and
``resources``. Every module here imports nothing of perbench but ``errors``, ``io`` and this package, so the config
and every room can read these sections without each other."""
