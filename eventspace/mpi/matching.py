"""Messages of an MPI run: each send's record matched to the record of the receive that got it."""

from __future__ import annotations

import numpy as np

from . import encoding as e

# A record that cannot be one end of a message: a test that found nothing, a request freed before
# it was seen complete (its peer and tag are only as posted), one the program cancelled.
_NOT_AN_END = e.EMPTY | e.FREED | e.CANCELLED
_SENDS = np.array(sorted(e.SENDS), dtype=np.uint16)
_RECEIVES = np.array(sorted(e.RECEIVES), dtype=np.uint16)
_POSTED_RECEIVES = np.array(sorted(e.RECEIVES & e.NONBLOCKING), dtype=np.uint16)


def message_pairs(records: np.ndarray, catalogue) -> list[tuple[int, int]]:
    """(send, receive) pairs of record positions in `records` (trace.DTYPE), one per message whose
    two ends are both there, in order of the send's position.

    A message's sending end is a blocking send (or a Sendrecv's send half) or the posting call
    of a nonblocking send; its receiving end a blocking receive (or a Sendrecv's receive half) or
    the request record of a nonblocking one (a completion call saw it complete), which hold the
    actual source and tag, also for MPI.ANY_SOURCE and MPI.ANY_TAG. They match as MPI matches
    them (non-overtaking): on one communicator, from one source to one destination with one
    tag, the k-th send (in the order its call began) is received by the k-th receive (in the
    order posted: its record's t_start). So the pairs are exact when `records` hold every
    channel from its first message on (an archive of the run, or a stream attached before the
    messages); where one end's first records were discarded before they were read, that
    channel's pairs are off. Sends beyond a channel's last receive stay unmatched.
    """
    sends, receives = message_ends(records, catalogue)
    by_channel: dict[tuple, list[int]] = {}
    for position, channel in sends:
        by_channel.setdefault(channel, []).append(position)
    t_start = records["t_start"]
    got: dict[tuple, list[int]] = {}
    for position, channel in receives:
        got.setdefault(channel, []).append(position)
    pairs = []
    for channel, senders in by_channel.items():
        receivers = got.get(channel)
        if receivers:
            senders.sort(key=lambda i: (int(t_start[i]), i))
            receivers.sort(key=lambda i: (int(t_start[i]), i))
            pairs.extend(zip(senders, receivers))
    pairs.sort()
    return pairs


def message_ends(records: np.ndarray, catalogue) -> tuple[list, list]:
    """([(position, channel)] of the records that are a message's sending end, the same of its
    receiving ends (see `message_pairs`), in order of position; a channel is (communicator,
    source world rank, destination world rank, tag)."""
    entries = catalogue.entries
    # Per collector id (0 stands for one the catalogue does not know): its rank and communicator (-1: none).
    rank_of = np.full(len(entries) + 1, -1, dtype=np.int64)
    comm_of = np.full(len(entries) + 1, -1, dtype=np.int64)
    for cid, entry in enumerate(entries, 1):
        rank, comm = e.rank_of(entry.thread), e.comm_of(entry)
        if rank is not None and comm is not None and entry.role == "source":
            rank_of[cid], comm_of[cid] = rank, comm
    cid = records["collector"].astype(np.int64)
    cid[(cid < 1) | (cid > len(entries))] = 0
    op, flags, peer = records["op"], records["flags"], records["element"]
    usable = (comm_of[cid] >= 0) & (flags & _NOT_AN_END == 0) & (peer < e.PEER_ANY)
    request = flags & e.REQUEST != 0
    sending = usable & np.isin(op, _SENDS) & ~request
    receiving = usable & np.isin(op, _RECEIVES) & (request | ~np.isin(op, _POSTED_RECEIVES))
    rank, comm, tag = rank_of[cid].tolist(), comm_of[cid].tolist(), records["arg"].tolist()
    peer = peer.tolist()
    sends = [(i, (comm[i], rank[i], peer[i], tag[i])) for i in np.flatnonzero(sending).tolist()]
    receives = [(i, (comm[i], peer[i], rank[i], tag[i])) for i in np.flatnonzero(receiving).tolist()]
    return sends, receives
