"""The one writer of every output: a path claimed at the start (proven by doing what the write
will do), the whole output written at the end (renamed over a file, in place into a device, a
FIFO or a descriptor), a log appended as it happens, and the refusals, one line each."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_enginedead.harness import outputs
from pytest_enginedead.harness.outputs import FILE, STREAM, OutputError, claim

WHERE = "--enginedead-report 'x'"


def leftovers(directory: Path) -> list[str]:
    """Temporary siblings an output left behind."""
    return [p.name for p in directory.rglob(f"{outputs.TEMP_PREFIX}*")]


def refused(path: str, *taken: outputs.Output) -> str:
    with pytest.raises(OutputError) as caught:
        claim(path, WHERE, taken)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: ") and "\n" not in message
    return message


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# --- a file: claimed by creating its sibling, written whole by renaming over it ----------------


def test_a_new_path_is_proven_creatable_and_left_as_it_was(tmp_path: Path) -> None:
    """The claim makes the missing directories and a temporary sibling, then takes them back:
    nothing is left until the write, which makes them again and the file."""
    path = tmp_path / "a" / "b" / "report.json"
    out = claim(str(path), WHERE)
    assert (out.kind, out.fresh, out.target, out.path) == (FILE, True, str(path), str(path))
    assert list(tmp_path.iterdir()) == []
    with umask(0o027):
        out.write_text("{}\n")
    assert path.read_text() == "{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # as open() makes a new file: 0666 - umask
    assert leftovers(tmp_path) == []


def test_an_existing_file_is_replaced_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")
    path.chmod(0o600)
    out = claim(str(path), WHERE)
    assert (out.kind, out.fresh) == (FILE, False)
    with open(path) as reader:  # a reader of the old file never sees half of the new one
        out.write_bytes(b"new")
        assert reader.read() == "old"
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert leftovers(tmp_path) == []


def test_a_link_to_a_file_keeps_pointing_at_it(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    out = claim(str(link), WHERE)
    assert out.target == str(real)
    out.write_text("new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_link_to_nothing_is_written_through_where_its_directory_exists(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    out = claim(str(link), WHERE)
    assert out.fresh and out.target == str(tmp_path / "made.json")
    out.write_text("x")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "x"
    lost = tmp_path / "lost.json"
    lost.symlink_to(tmp_path / "nowhere" / "x.json")
    message = refused(str(lost))
    assert "is a symbolic link to" in message and message.endswith("whose directory does not exist")


def test_a_home_path_is_expanded_and_an_unknown_users_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert claim("~/r.json", WHERE).path == str(tmp_path / "r.json")
    assert "cannot be expanded: no home directory for '~enginedead-nobody'" in refused(
        "~enginedead-nobody/r.json")


def test_a_relative_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert claim("  r.json ", WHERE).path == str(tmp_path / "r.json")  # the spaces around it too


# --- what no write could take: refused at the claim, one line that starts with where ----------


def test_paths_no_file_can_be_written_at_are_refused(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    (tmp_path / "gone").symlink_to(tmp_path / "nothing")
    assert refused("  ").endswith("no path given")
    assert "contains a NUL byte" in refused(f"{tmp_path}/a\0b")
    assert "is a directory; give a file path" in refused(str(tmp_path / "dir"))
    assert "is not a directory" in refused(str(tmp_path / "file" / "r.json"))
    assert "which does not exist; make that directory" in refused(str(tmp_path / "gone" / "r.json"))
    assert f"at most {outputs.MAX_NAME_BYTES} bytes" in refused(str(tmp_path / ("n" * 256)))
    deep = "/".join(["d" * 200] * 21)
    assert f"at most {outputs.MAX_PATH_BYTES} bytes" in refused(f"{tmp_path}/{deep}")
    assert leftovers(tmp_path) == []


def test_the_kernels_directories_take_no_new_file_even_as_root() -> None:
    """``access()`` says yes to /proc as root; making the file for real says no."""
    message = refused("/proc/enginedead-report.json")
    assert "cannot be created: making a file in '/proc' failed" in message
    assert message.endswith("(/proc is the kernel's; it takes no new files)")


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert "is a socket; give a file path" in refused(str(path))


def test_a_long_path_is_shown_by_its_head_and_tail(tmp_path: Path) -> None:
    long_dir = tmp_path / ("x" * 150)
    long_dir.mkdir()
    message = refused(str(long_dir))
    assert "..." in message and str(long_dir) not in message and message.endswith("give a file path")


def test_two_outputs_need_two_files(tmp_path: Path) -> None:
    """A file (by any path, a link to it included) or a new path can take one output; a character
    device like /dev/null any number."""
    report = claim(str(tmp_path / "r.json"), "--report")
    assert "names the same file as --report" in refused(str(tmp_path / "." / "r.json"), report)
    (tmp_path / "real").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    real = claim(str(tmp_path / "real"), "--report")
    assert "each output needs a file of its own" in refused(str(tmp_path / "link"), real)
    first = claim(os.devnull, "--report")
    second = claim(os.devnull, "--log", [first])
    assert (first.kind, second.kind) == (STREAM, STREAM)
    for out in (first, second):
        out.write_text("nothing kept")


# --- a stream: written in place through the descriptor the claim opened -----------------------


def test_a_fifo_nobody_reads_is_refused_and_one_with_a_reader_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "is a FIFO that nothing reads; writing to it would wait forever" in refused(str(fifo))
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        out = claim(str(fifo), WHERE)
        assert out.kind == STREAM
        out.write_bytes(b"whole")
        assert os.read(reader, 100) == b"whole"
        assert stat.S_ISFIFO(fifo.stat().st_mode)  # never renamed over
        out.write_bytes(b" again")  # the claim's descriptor was closed by the write: opened again
        assert os.read(reader, 100) == b" again"
    finally:
        os.close(reader)


def test_a_fifo_write_waits_for_its_reader_as_any_pipe_write_does(tmp_path: Path) -> None:
    """The claim opens a FIFO without blocking (nothing reading must not hang it), but the write
    waits for the reader: more than the pipe holds arrives whole, not as EAGAIN."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    out = claim(str(fifo), WHERE)
    os.set_blocking(reader, True)
    data = bytes(range(256)) * 4096  # 1 MiB: sixteen pipe buffers
    got = bytearray()

    def drain() -> None:
        while len(got) < len(data):
            chunk = os.read(reader, 65536)
            if not chunk:
                return
            got.extend(chunk)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        out.write_bytes(data)
        thread.join(30)
    finally:
        os.close(reader)
    assert bytes(got) == data


def test_a_descriptor_of_this_process_is_shared_as_a_shell_would(tmp_path: Path) -> None:
    """``/dev/fd/N`` (and ``/dev/stdout``) names one of this process's descriptors: duplicated,
    so the output goes where that descriptor goes."""
    read_end, write_end = os.pipe()
    try:
        out = claim(f"/dev/fd/{write_end}", WHERE)
        assert out.kind == STREAM
        out.write_text("to the pipe")
        assert os.read(read_end, 100) == b"to the pipe"
        assert os.fstat(write_end)  # this process's own descriptor is still open
    finally:
        os.close(read_end)
        os.close(write_end)


def test_close_lets_go_of_the_claims_descriptor(tmp_path: Path) -> None:
    out = claim(os.devnull, WHERE)
    fd = out._fd
    assert fd is not None
    out.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    out.write_text("reopened")  # writing after close opens it again


# --- at the write: what changed since the claim -----------------------------------------------


def test_a_path_that_became_a_device_since_the_claim_is_not_renamed_over(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    out = claim(str(path), WHERE)
    path.symlink_to(os.devnull)
    with pytest.raises(OutputError, match=r"is no longer a regular file"):
        out.write_text("x")
    assert path.is_symlink() and leftovers(tmp_path) == []


def test_a_directory_that_became_a_file_since_the_claim_is_one_line(tmp_path: Path) -> None:
    out = claim(str(tmp_path / "sub" / "r.json"), WHERE)
    (tmp_path / "sub").write_text("in the way")
    with pytest.raises(OutputError, match=rf"^{WHERE}: cannot be written: "):
        out.write_text("x")
    with pytest.raises(OutputError, match=rf"^{WHERE}: cannot be written: "):
        out.open()


# --- the log: appended as it happens, discarded when the run kept nothing ---------------------


def test_a_log_is_appended_and_its_directory_made(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "check.log"
    out = claim(str(path), WHERE)
    with out.open() as log:
        log.write(b"first\n")
    with out.open() as log:
        log.write(b"second\n")
    assert path.read_bytes() == b"first\nsecond\n"


def test_a_log_into_a_pipe_is_written_in_place(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        out = claim(f"/dev/fd/{write_end}", WHERE)
        with out.open() as log:
            log.write(b"line\n")
        assert os.read(read_end, 100) == b"line\n"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_discard_removes_only_what_the_output_made(tmp_path: Path) -> None:
    made = claim(str(tmp_path / "made.log"), WHERE)
    with made.open() as log:
        log.write(b"refused before it began")
    made.discard()
    assert not (tmp_path / "made.log").exists()
    kept = tmp_path / "kept.log"
    kept.write_text("an earlier run's")
    there = claim(str(kept), WHERE)
    with there.open() as log:
        log.write(b", and this one's")
    there.discard()
    assert kept.read_text() == "an earlier run's, and this one's"
    null = claim(os.devnull, WHERE)
    null.discard()
    assert Path(os.devnull).is_char_device()
