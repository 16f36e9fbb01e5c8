"""The names of the calls every node's event space hosts (see `pastset.TupleServer.host`), and of what its
environment may ask of it, in one place."""

CLOCK = "eventspace.clock"              # () -> this node's clock, ns
CLOCK_CHILDREN = "eventspace.clock.children"  # ([nodes], samples, timeout) -> {node: [offset ns, delay ns]} from here
INFLIGHT = "eventspace.inflight"        # () -> [[collector id, start ns, *mark], ...] of operations under way
OFF = "eventspace.off"                  # () -> [collector id, ...] of this node's collectors switched off
INSTALL = "eventspace.scope.install"    # (join spec, lease s) -> None: place a scope join here
PULL = "eventspace.scope.pull"          # (key[, level of the join that pulls]) -> a placed join's Pulled, as wire data
REMOVE = "eventspace.scope.remove"      # (key) -> its stream cursors: the join is gone
RENEW = "eventspace.scope.renew"        # ([keys], lease s) -> how many were renewed
LIST = "eventspace.scope.list"          # () -> the keys of the joins placed here
CURSORS = "eventspace.scope.cursors"    # (key) -> a placed join's stream cursors
RECORD_FLUSH = "eventspace.record.flush"    # () -> the node's recorder's counts, once what its rings hold is written
RECORD_WINDOW = "eventspace.record.window"  # (offset, most) -> [bytes of its recording from offset, total bytes,
                                            #   newest record's end ns, window seconds or 0]

# In the environment of a recorded PATHS run's nodes: JSON {spec, dir, run}, what each records and where
# (NodeSpace starts its recorder from it: eventspace.recording.node_recorder).
RECORDING_ENVIRONMENT = "EVENTSPACE_RECORDING"
