"""What a command writes: a file the user names (``export -o``, ``report --html``) and standard output.

* ``check_destination``: before anything is read, a path that cannot be written is one line naming it and why
  (exit 2), never a traceback after the work was done;
* ``opened``: the stream to write to; a regular file is written beside itself and renamed once complete, a FIFO or
  a device written to as it is, a write that fails one line (exit 1);
* ``reader_gone``: a reader that closed the pipe (``crawlhub export X | head``) had what it wanted: the command
  stops quietly with status 0, as ``git log | head`` does (docs/cli.md, "Exit codes").
"""

from __future__ import annotations

import os
import select
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO, NoReturn

import click

from crawlhub.cli._common import BadInput


def streams_to(path: str) -> bool:
    """Whether ``path`` (through any symlink) is something written to as it is: a FIFO, a device, a socket."""
    try:
        mode = os.stat(path).st_mode  # through symlinks (one to /proc/self/fd/1 is a pipe)
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_destination(path: str, option: str) -> None:
    """BadInput (exit 2) when ``path``, given as ``option`` (``-o``, ``--html``), cannot be written: a directory, a
    missing directory, no permission. A symlink is judged by what it points to; ``-`` is standard output."""
    if path == "-":
        return
    if os.path.isdir(path):
        example = os.path.join(path, "items.jsonl" if option == "-o" else "report.html")
        raise BadInput(f"{option} {path}: is a directory; give a file name in it ({example})")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise BadInput(f"{option} {path}: permission denied (cannot write to it)")
        if streams_to(path):
            return  # a FIFO, a device, a socket: written to as it is
    target = os.path.realpath(path)
    folder = os.path.dirname(target) or "."
    if not os.path.isdir(folder):
        raise BadInput(f"{option} {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{option} {path}: cannot create files in {folder} (permission denied)")


@contextmanager
def opened(path: str) -> Iterator[IO[bytes]]:
    """The binary stream to write to, and what happens when writing fails.

    * ``-``: standard output;
    * a regular file (or none yet): ``<file>.part`` beside it, renamed over it once complete, so a command that fails
      leaves no file that looks whole and the old one as it was; a symlink's target is replaced, the link kept;
    * anything else (a FIFO, a character device, a symlink to a pipe): opened and written to, never replaced.

    A reader that closed the pipe ends the command quietly (``reader_gone``); another write that fails (a full disk)
    ends it with one line (exit 1), the ``.part`` removed.
    """
    target = path
    partial = None
    try:
        if path == "-":
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        elif streams_to(path):
            with open(path, "wb") as out:
                yield out
        else:
            target = os.path.realpath(path)  # a symlink's target is replaced, the link kept
            partial = f"{target}.part"
            with open(partial, "wb") as out:
                yield out
            os.replace(partial, target)
            partial = None
    except BrokenPipeError:
        reader_gone()
    except OSError as exc:
        raise click.ClickException(f"writing {'standard output' if path == '-' else path} failed: "
                                   f"{exc.strerror or exc}; {'nothing was left behind' if partial else 'the output is incomplete'}") from None
    finally:
        if partial and os.path.exists(partial):
            os.unlink(partial)


def stdout_closed() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone: its end reports an error to poll."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no standard output at all (closed, None): nobody reads it
        return True


def reader_gone() -> NoReturn:
    """Stop quietly, with status 0: the reader of what this command writes (``| head``) closed it, which is its
    choice. Standard output is pointed at /dev/null first, so that Python's flush at exit has nowhere to fail."""
    with suppress(OSError, ValueError):  # (standard output closed outright: nothing to point)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(0)
