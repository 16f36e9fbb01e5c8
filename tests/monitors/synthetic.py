"""What the synthetic trace batches of this directory's conftest share with the tests that read them
(a module of its own: `from conftest import` finds whichever conftest was imported first)."""

T0 = 1_000_000_000_000   # ns: the batches' clock does not start at zero
