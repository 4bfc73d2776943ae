"""Every file the plugin and the command write, through one writer.

``claim(path, where)`` is called at the start, before anything runs: it proves the
path can take the output by doing what the write will do, for real — creating the
temporary sibling a file is written to (then removing it), or opening a device or a
FIFO for writing without blocking — because permissions cannot be guessed (as root,
``access()`` says yes to ``/proc`` and ``/sys``).  A path that cannot work is an
``OutputError``: one line that starts with ``where`` (how the user gave the path).

At the end, ``Output.write_text`` / ``write_bytes`` write the whole output:

* a regular file (or a path not there yet) is written to a temporary sibling and
  renamed over its target, so a reader never sees half of it; a symbolic link to a
  file keeps pointing at it (the file it names is replaced, not the link);
* a character device (``/dev/null``, a terminal, ``mknod nulldev c 1 3``), a FIFO that
  has a reader, or an open descriptor (``/dev/stdout``, ``/dev/fd/N``) is written in
  place, through the descriptor opened at the claim — never renamed over;
* a directory, a block device, a socket, a FIFO nobody reads, a dangling symbolic
  link on the way, two outputs naming one file: refused at the claim.

``Output.open()`` gives a stream for what is written as it happens (a log);
``Output.discard()`` removes a file the claim found absent (a run that ended with nothing to keep).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

#: a name the kernel takes (NAME_MAX) and a whole path (PATH_MAX, with its NUL)
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095
#: how an output's temporary sibling is named (hidden, short: any file name fits beside it)
TEMP_PREFIX = ".enginedead-"
TEMP_SUFFIX = ".tmp"
#: a link to one of a process's open descriptors (what /dev/stdout and /dev/fd/N are)
_FD_LINK = re.compile(r"^/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd/\d+$")
#: whether a target is written through a temporary sibling or in place
FILE, STREAM = "file", "stream"


class OutputError(ValueError):
    """An output path that cannot take its output; the message is one line naming it."""


@dataclass
class Output:
    """A claimed output path: where the bytes go, and how they are written."""

    #: the path as the user gave it, ``~`` expanded
    path: str
    #: how the user gave it, for messages: ``--enginedead-report='x' (from command line)``
    where: str
    #: where the bytes go: the file a symbolic link names, or ``path`` for a stream
    target: str
    #: FILE (temporary sibling, renamed over the target) or STREAM (written in place)
    kind: str
    #: what makes two outputs the same: (device, inode) of what exists, else the resolved path
    identity: tuple[object, ...]
    #: a stream's descriptor, opened at the claim and held until it is written
    _fd: int | None = field(default=None, repr=False)
    #: nothing was there at the claim: whatever the path holds now, this output made
    fresh: bool = False

    def write_bytes(self, data: bytes) -> None:
        """The whole output, written once; ``OutputError`` (one line) if it cannot be."""
        if self.kind == STREAM:
            self._write_stream(data)
        else:
            self._write_file(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def open(self) -> BinaryIO:
        """A binary stream for output written as it happens (a log): appended in place."""
        if self.kind == STREAM:
            fd, self._fd = self._take_fd(), None
            return os.fdopen(fd, "ab", buffering=0)
        try:
            os.makedirs(os.path.dirname(self.target), exist_ok=True)
            return open(self.target, "ab")  # the caller closes it
        except OSError as exc:
            raise OutputError(f"{self.where}: cannot be written: {_reason(exc)}") from None

    def close(self) -> None:
        """Let go of what the claim holds (a stream's descriptor); writing after this reopens it."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Take back what this output made: a file that was not there at the claim is removed
        (a run that ended with nothing to keep); anything that was there is left as it is."""
        self.close()
        if self.kind == FILE and self.fresh:
            with contextlib.suppress(OSError):
                os.unlink(self.target)

    def same_as(self, other: Output) -> bool:
        return self.identity == other.identity

    def _take_fd(self) -> int:
        if self._fd is not None:
            return self._fd
        return _open_stream(self.path, self.where)  # closed since the claim: open it again

    def _write_stream(self, data: bytes) -> None:
        fd, self._fd = self._take_fd(), None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            raise OutputError(f"{self.where}: writing it in place failed: {_reason(exc)}") from None
        finally:
            os.close(fd)

    def _write_file(self, data: bytes) -> None:
        directory = os.path.dirname(self.target)
        tmp = None
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=directory)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, _mode_for(self.target))
            if _kind_now(self.target) == STREAM:  # became a device since the claim: never rename over it
                raise OutputError(f"{self.where}: {self.target!r} is no longer a regular file")
            os.replace(tmp, self.target)
            tmp = None
        except OSError as exc:
            raise OutputError(f"{self.where}: cannot be written: {_reason(exc)}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def claim(path: str, where: str, taken: Iterable[Output] = ()) -> Output:
    """Prove ``path`` can take an output now, by creating it for real; the claimed ``Output``.

    ``where`` is how the user gave it (it starts every message); ``taken`` are the
    outputs already claimed for this run: naming the same file as one of them is refused.
    """
    text = path.strip()
    if not text:
        raise OutputError(f"{where}: no path given")
    absolute = os.path.abspath(_expand(text, where))
    _check_lengths(absolute, where)
    out = _stream_claim(absolute, where) if _fd_link(absolute) else _file_or_device(absolute, where)
    for other in taken:
        if out.same_as(other) and not _harmless_twice(out):
            out.close()
            raise OutputError(
                f"{where}: names the same file as {other.where}; each output needs a file of its own"
            )
    return out


def _expand(text: str, where: str) -> str:
    if "\0" in text:
        raise OutputError(f"{where}: {text!r} contains a NUL byte")
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):  # ~user that does not exist, or no home directory
        head = text.split(os.sep, 1)[0]
        raise OutputError(f"{where}: {text!r} cannot be expanded: no home directory for {head!r}")
    return expanded


def _check_lengths(absolute: str, where: str) -> None:
    name = os.path.basename(absolute)
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise OutputError(
            f"{where}: {name[:40]!r}... is too long a file name (at most {MAX_NAME_BYTES} bytes)"
        )
    if len(os.fsencode(absolute)) > MAX_PATH_BYTES:
        raise OutputError(
            f"{where}: {absolute[:40]!r}... is too long a path (at most {MAX_PATH_BYTES} bytes)"
        )


def _fd_link(absolute: str) -> str | None:
    """The link to a process's descriptor the path's chain of links reaches (/dev/stdout), or None."""
    current = absolute
    for _ in range(40):  # the kernel's own limit on a chain of links
        current = os.path.join(os.path.realpath(os.path.dirname(current)), os.path.basename(current))
        if _FD_LINK.match(current):
            return current
        try:
            link = os.readlink(current)
        except OSError:
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), link))
    return None


def _own_fd(absolute: str) -> int | None:
    """The descriptor of this process a path names (``/dev/stdout`` is 1), or None."""
    link = _fd_link(absolute)
    if link is None:
        return None
    process = link.split("/")[2]
    if process in ("self", "thread-self", str(os.getpid())):
        return int(link.rsplit("/", 1)[1])
    return None


def _stat(path: str, where: str, follow: bool = True) -> os.stat_result | None:
    """``stat(path)`` (``lstat`` unless ``follow``), None when nothing is there; an OS refusal
    (a name too long, a loop of links) is an OutputError."""
    try:
        return os.stat(path, follow_symlinks=follow)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise OutputError(f"{where}: {_shown(path)!r} cannot be used: {_reason(exc)}") from None


def _lstat(path: str, where: str) -> os.stat_result | None:
    return _stat(path, where, follow=False)


def _file_or_device(absolute: str, where: str) -> Output:
    """A path that is (or will be) a file, or names a device or FIFO: checked, claimed."""
    _no_dangling_links(os.path.dirname(absolute), where)
    st = _stat(absolute, where)
    if st is None:
        if _lstat(absolute, where) is not None:  # a link to nothing: the file it names must be creatable
            target = os.path.realpath(absolute)
            if not os.path.isdir(os.path.dirname(target)):
                raise OutputError(
                    f"{where}: {_shown(absolute)!r} is a symbolic link to {_shown(os.readlink(absolute))!r}, "
                    "whose directory does not exist"
                )
        else:
            target = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
        _prove_creatable(target, where)
        return Output(absolute, where, target, FILE, ("path", target), fresh=True)
    mode = st.st_mode
    if stat.S_ISREG(mode):
        target = os.path.realpath(absolute)
        _prove_creatable(target, where)
        return Output(absolute, where, target, FILE, ("inode", st.st_dev, st.st_ino))
    if stat.S_ISDIR(mode):
        raise OutputError(f"{where}: {_shown(absolute)!r} is a directory; give a file path")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return _stream_claim(absolute, where)
    what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
    raise OutputError(f"{where}: {_shown(absolute)!r} is {what}; give a file path")


def _no_dangling_links(directory: str, where: str) -> None:
    """Every directory on the way exists, or can be made: none is a link to nothing, or a file."""
    current = directory
    while True:
        st = _lstat(current, where)
        if st is not None:
            if stat.S_ISLNK(st.st_mode) and _stat(current, where) is None:
                raise OutputError(
                    f"{where}: {_shown(current)!r} is a symbolic link to {_shown(os.readlink(current))!r}, "
                    "which does not exist; make that directory or give another path"
                )
            if not os.path.isdir(current):
                raise OutputError(f"{where}: cannot be created: {_shown(current)!r} is not a directory")
            return
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def _prove_creatable(target: str, where: str) -> None:
    """Create the directories and the temporary sibling the write will create, then remove them."""
    directory = os.path.dirname(target)
    made: list[str] = []
    try:
        missing = []
        current = directory
        while not os.path.lexists(current):
            missing.append(current)
            current = os.path.dirname(current)
        for d in reversed(missing):
            os.mkdir(d)
            made.append(d)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        where_made = made[-1] if made else directory
        raise OutputError(
            f"{where}: cannot be created: making a file in {_shown(where_made)!r} failed: {_reason(exc)}"
            + _kernel_hint(where_made)
        ) from None
    finally:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(d)


def _kernel_hint(directory: str) -> str:
    real = os.path.realpath(directory)
    for mount in ("/proc", "/sys"):
        if real == mount or real.startswith(mount + "/"):
            return f" ({mount} is the kernel's; it takes no new files)"
    return ""


def _stream_claim(path: str, where: str) -> Output:
    fd = _open_stream(path, where)
    st = os.fstat(fd)
    return Output(path, where, path, STREAM, ("inode", st.st_dev, st.st_ino), fd)


def _open_stream(path: str, where: str) -> int:
    """Open a device, FIFO or descriptor link for writing in place, without blocking.

    One of this process's own descriptors (``/dev/stdout``) is duplicated, as a shell
    does: the output then shares its position with what else this process writes there.
    """
    own = _own_fd(path)
    try:
        if own is not None:
            fd = os.dup(own)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(
                f"{where}: {_shown(path)!r} is a FIFO that nothing reads; writing to it would wait "
                "forever: give a file path, or start its reader first"
            ) from None
        raise OutputError(f"{where}: {_shown(path)!r} cannot be opened for writing: {_reason(exc)}") from None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        os.close(fd)
        raise OutputError(f"{where}: {_shown(path)!r} is not a file, a device or a pipe; give a file path")
    if own is None:  # writes wait for the reader, as any write to a pipe does
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _kind_now(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return FILE if stat.S_ISREG(mode) else STREAM


def _harmless_twice(out: Output) -> bool:
    """A character device (``/dev/null``, a terminal) can take two outputs; nothing is replaced."""
    if out.kind != STREAM or out._fd is None:
        return False
    return stat.S_ISCHR(os.fstat(out._fd).st_mode)


def _mode_for(target: str) -> int:
    """The file's own mode if it exists, else what ``open()`` would give a new file (0666 - umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _shown(path: str, limit: int = 120) -> str:
    """A path as a message shows it: long ones keep their head and tail."""
    return path if len(path) <= limit else f"{path[:40]}...{path[-(limit - 43):]}"


__all__ = ["FILE", "STREAM", "Output", "OutputError", "claim"]
