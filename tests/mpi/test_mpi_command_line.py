"""`python -m eventspace.mpi`'s command line: our options, then the program and its own arguments,
read by one parser (eventspace.mpi.launch.parse, which `eventspace mpirun` checks its ranks' with)."""

from __future__ import annotations

import pytest
from jobs import requires_mpi

from eventspace.mpi.launch import UsageError, parse


def test_the_program_s_own_options_are_its_own_even_when_they_share_our_names():
    options, program = parse(["--name", "mine", "prog.py", "--name", "its", "-h", "--keep", "x"])
    assert options.name == "mine" and options.keep > 1
    assert program == ["prog.py", "--name", "its", "-h", "--keep", "x"]


def test_a_module_runs_with_its_arguments():
    options, program = parse(["--keep", "7", "-m", "pkg.tool", "--keep", "3", "-v"])
    assert options.keep == 7 and options.default_name == "pkg.tool"
    assert program == ["-m", "pkg.tool", "--keep", "3", "-v"]


def test_a_double_dash_ends_our_options():
    assert parse(["--insecure", "--", "prog.py", "--", "x"])[1] == ["prog.py", "--", "x"]
    options, program = parse(["--name=n", "--", "-m", "tool"])
    assert options.name == "n" and program == ["-m", "tool"]


def test_our_options_may_be_abbreviated_as_argparse_allows_everywhere_else():
    options, program = parse(["--inst", "p2p", "--max-comm", "4", "prog.py", "a"])
    assert (options.instrument, options.max_communicators, program) == ("p2p", 4, ["prog.py", "a"])


@pytest.mark.parametrize("argv", [[], ["--name", "x"], ["-m"], ["--keep", "3", "--"]])
def test_no_program_is_one_clear_error(argv):
    with pytest.raises(UsageError, match="name the program to run"):
        parse(argv)


def test_a_bad_option_of_ours_is_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as ended:
        parse(["--keep", "many", "prog.py"])
    assert ended.value.code == 2 and "--keep" in capsys.readouterr().err


@requires_mpi
def test_mpirun_hands_its_ranks_the_program_as_it_was_given():
    """Its ranks read their command line with the same parser: the program's options stay its own."""
    from eventspace.cli import build_parser
    from eventspace.mpi.cli import command

    args = build_parser().parse_args(["mpirun", "-n", "2", "--inst", "p2p", "-m", "tool", "--name", "its"])
    cmd, name = command(args)
    ranks = cmd[cmd.index("eventspace.mpi") + 1:]
    assert name == "tool" and parse(ranks)[1] == ["-m", "tool", "--name", "its"]
    assert parse(ranks)[0].instrument == "p2p"
