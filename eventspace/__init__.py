"""EventSpace: events of a parallel application, collected where they happen and gathered to monitors.

Event collectors, inserted into an application's PATHS paths (`paths`) or around an unmodified
mpi4py program's MPI calls (`eventspace.mpi`), time each operation and append one 36-byte trace
tuple to a trace element of the node's tuple space (`pastset`). The catalogue names every
collector of a run from its pathmap alone; event scopes gather the records up trees of joins to
the monitors (`monitors`), and recorders write them to archives.

The package stands on pastset and paths, and apps and monitors stand on it. Inside it, its
modules stand on floors, lowest first; a module imports only from its own floor and the floors
below (`tests/test_architecture.py` checks it, reading this list):

1. the record: `opcodes`, `trace`, `clock`, `hosted`
2. what reads records: `catalogue`, `view`, `histogram`, `classes`, `ignored`, `stages`, `blocks`, `recorder`
3. what gathers and keeps them: `gather`, `archive`, `recording`
4. a node's event space: `space`, `table`, `compiled`, `collector`, `system`, `scope`, `roster`
5. the `eventspace` command: `cli`, `commands`
6. MPI runs: `mpi` (all of `eventspace.mpi`)

Nothing is imported here: `import eventspace.scope` costs only what the scope needs.
"""
