"""The `purelink` command: one module per verb (serve, send, read/tail/streams, demo, bench).

command.py holds the parser and dispatch; args.py and common.py what the verbs
share; progress.py the progress bar of `send` and `demo`.
"""

from .command import main

__all__ = ["main"]
