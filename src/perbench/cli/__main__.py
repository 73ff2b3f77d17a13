"""``python -m perbench.cli``: the ``perbench`` command."""

from perbench.cli import main

raise SystemExit(main())
