"""``perbench`` command line: run, list, validate, build, report, compare, plan, export, serve.

One module per subcommand (``add_parser`` wires its arguments, ``command`` runs it); this module holds the
entry point. Every error a user can act on (a :class:`~perbench.errors.PerbenchError`, or an OS error naming a
file) is one line on stderr, ``perbench: error: …``, and exit code 2; ``--debug`` (before or after the command)
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from perbench.cli import build, compare, export, listing, plan, report, serve, validate
from perbench.cli import run as run_cmd
from perbench.cli.listing import offline_unless_set as _offline_unless_set
from perbench.cli.run import announce_remote_code as _announce_remote_code
from perbench.cli.shared import config_path as _config_path
from perbench.errors import PerbenchError

__all__ = ["_announce_remote_code", "_config_path", "_offline_unless_set", "main"]

#: subcommand -> the function that runs it
HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run_cmd.command,
    "list": listing.command,
    "validate": validate.command,
    "build": build.command,
    "report": report.command,
    "compare": compare.command,
    "plan": plan.command,
    "export": export.command,
    "serve": serve.command,
}


def _user_error(e: BaseException) -> bool:
    """An error the user can act on: printed as one line. Anything else is a bug: its traceback is shown."""
    if isinstance(e, PerbenchError):
        return True
    if isinstance(e, OSError):
        return e.filename is not None or isinstance(e, FileNotFoundError)
    return False


def _one_line(e: BaseException) -> str:
    return " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error"
    )
    common.add_argument(
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="no progress bars or log lines (perbench's and transformers', datasets', gguf's): PERBENCH_QUIET=1",
    )
    parser = argparse.ArgumentParser(
        prog="perbench", description="Which personalized reward model should I deploy?", parents=[common]
    )
    from perbench import __version__

    parser.add_argument("--version", action="version", version=f"perbench {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for module in (run_cmd, export, serve, listing, validate, build, report, compare, plan):  # the order of --help
        module.add_parser(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    args.argv = argv
    if getattr(args, "quiet", False):
        os.environ["PERBENCH_QUIET"] = "1"
    from perbench.progress import quiet_third_party

    quiet_third_party()
    try:
        return HANDLERS[args.cmd](args)
    except Exception as e:
        if getattr(args, "debug", False) or not _user_error(e):
            raise
        print(f"perbench: error: {_one_line(e)}", file=sys.stderr)
        return 2
