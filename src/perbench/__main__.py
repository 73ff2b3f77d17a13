"""``python -m perbench``: the ``perbench`` command."""

from perbench.cli import main

raise SystemExit(main())
