"""Ray's own output in the driver process kept out of the terminal (:class:`RayOutput`)."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any


class RayOutput:
    """Ray's own output in the driver process, appended to ``perbench-driver.log`` in Ray's session log folder
    (``…/session_latest/logs`` on the driver's machine) instead of the terminal: the messages the cluster publishes
    to the driver (a lost node's, a killed worker's, a raylet's ``[state-dump]`` lines), which Ray prints to stdout
    even with ``log_to_driver=False``, and the lines of Ray's Python loggers, which it prints to stderr. perbench
    reports every failure itself, as one line."""

    NAME = "perbench-driver.log"

    def __init__(self) -> None:
        self._saved: tuple[Any, list[Any]] | None = None

    def path(self) -> Path:
        """The file: in Ray's session log folder once the driver has joined, else in this machine's temp folder."""
        from ray._private import worker

        node = getattr(worker, "_global_node", None)
        folder = Path(node.get_logs_dir_path()) if node is not None else Path(tempfile.gettempdir())
        return folder / self.NAME

    def write(self, text: str) -> None:
        with contextlib.suppress(OSError), open(self.path(), "a", encoding="utf-8") as fh:
            fh.write(text)

    def install(self) -> None:
        """Take over Ray's printing of published messages and its loggers' handlers (idempotent)."""
        import logging

        from ray._private import worker

        if self._saved is not None:
            return
        out = self

        def published(data: dict[str, Any], ignore_prefix: bool) -> None:  # Ray's print_to_stdstream, to the file
            out.write("".join(f"({data.get('pid', 'ray')}) {line}\n" for line in data.get("lines", ())))

        class ToFile(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                out.write(self.format(record) + "\n")

        handler = ToFile()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        ray_logger = logging.getLogger("ray")
        self._saved = (worker.print_to_stdstream, list(ray_logger.handlers))
        worker.print_to_stdstream = published
        ray_logger.handlers = [handler]

    def restore(self) -> None:
        import logging

        from ray._private import worker

        if self._saved is None:
            return
        worker.print_to_stdstream, logging.getLogger("ray").handlers = self._saved[0], self._saved[1]
        self._saved = None
