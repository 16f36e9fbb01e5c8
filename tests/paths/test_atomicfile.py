"""Files replaced whole (paths.atomicfile), the one way every writer replaces a file: never through a
link, whatever is planted beside the file, and the old file kept when the write fails."""

import os

import pytest

from paths.atomicfile import PRIVATE, replacing, write_atomically


def planted(path) -> tuple:
    """Links planted where a writer that named its temporary file after its pid would write (a
    predictable name), pointing at a victim file of the user's; (the victim, what it held)."""
    victim = path.with_name("victim")
    victim.write_text("the user's own file")
    os.symlink(victim, path.with_name(f".{path.name}.{os.getpid()}.tmp"))
    return victim, victim.read_text()


def test_a_file_is_replaced_whole_and_a_link_at_its_name_is_replaced_not_followed(tmp_path):
    out = tmp_path / "pathmap.yaml"
    victim = tmp_path / "victim"
    victim.write_text("kept")
    os.symlink(victim, out)
    write_atomically(out, "nodes: []\n")
    assert not out.is_symlink() and out.read_text() == "nodes: []\n"
    assert victim.read_text() == "kept"


def test_links_planted_beside_the_file_neither_stop_the_write_nor_receive_it(tmp_path):
    out = tmp_path / "pathmap.yaml"
    victim, held = planted(out)
    write_atomically(out, b"nodes: []\n")
    assert out.read_bytes() == b"nodes: []\n" and victim.read_text() == held


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "run.json"
    out.write_text("old")
    with pytest.raises(RuntimeError), replacing(out, "w") as f:
        f.write("half of the new")
        raise RuntimeError("disk full")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_private_file_is_readable_by_its_user_alone(tmp_path):
    out = tmp_path / "run.json"
    write_atomically(out, "{}", PRIVATE)
    assert out.stat().st_mode & 0o777 == 0o600
