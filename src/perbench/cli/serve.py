"""``perbench serve EXPORT``: an exported system as an HTTP reward service (shapes in perbench.export.serve)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "serve",
        parents=[common],
        help="serve an exported system over HTTP (OpenRLHF's --remote_rm_url, and a JSON shape with user ids)",
        description="Serve a folder written by `perbench export` as an HTTP reward service (docs/export.md):\n"
        '  POST /score       {"prompts", "responses", "users"} -> {"rewards", "known"}\n'
        '  POST /get_reward  {"query", "prompts", "labels"} -> {"rewards"}  (OpenRLHF --remote_rm_url;\n'
        "                    each row's user is its label)\n"
        "  GET  /health",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  perbench serve rm/ --port 5000\n"
        "  openrlhf ... --remote_rm_url http://127.0.0.1:5000/get_reward "
        "--label_key user_id",
    )
    p.add_argument("export_dir", metavar="EXPORT", help="a folder written by `perbench export`")
    p.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=5000, help="the port (default 5000; 0: any free port, printed)")
    p.add_argument("--user", help="the user of rows that name none (OpenRLHF requests without labels)")
    p.add_argument("--strict", action="store_true", help="refuse (400) rows whose user the system does not know")
    p.add_argument("--max-batch", type=int, default=256, metavar="ROWS", help="the most rows scored in one batch")
    p.add_argument("--device", help="where the backbone runs (default: auto)")
    p.add_argument("--backbone", help="load the backbone from here instead (its fingerprint must match)")


def command(args: argparse.Namespace) -> int:
    from perbench.errors import ConfigError
    from perbench.export.load import load_rm
    from perbench.export.serve import make_server

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: {args.port} is not a port (0 to 65535)")
    if args.max_batch < 1:
        raise ConfigError(f"--max-batch: {args.max_batch}: expected a positive number of rows")
    import warnings

    # a warning (an unknown user, once per user) as one line of the server's log, not Python's two
    def one_line(message: Warning | str, *_: object, **__: object) -> str:
        text = str(message).replace(" (load_rm(..., strict=True) raises instead)", " (--strict refuses such rows)")
        return f"perbench serve: warning: {text}\n"

    warnings.formatwarning = one_line
    rm = load_rm(args.export_dir, backbone=args.backbone, device=args.device, strict=args.strict)
    server = make_server(rm, args.host, args.port, user=args.user, max_rows=args.max_batch)
    host, port = server.server_address[:2]
    print(f"serving {rm.label} on http://{host}:{port} (POST /score, POST /get_reward, GET /health); Ctrl-C stops",
          flush=True)  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
