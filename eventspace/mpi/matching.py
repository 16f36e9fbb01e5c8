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
# A channel's communicator and ranks share one 63-bit key (21 bits each): more than 2 million
# world ranks or communicators is no real run's, and a record that names one is no message's end.
_BITS = 21
LIMIT = 1 << _BITS

# What the matcher knows of each end: its channel, when its call began (`t`), and its `ring` (the
# collector whose records it is in): ends of one channel are numbered in `t` order.
ENDS = np.dtype([("comm", "i8"), ("src", "i8"), ("dst", "i8"), ("tag", "i8"), ("t", "i8"), ("ring", "i8")])
# A posted nonblocking receive (its post record), or its end (its request record): ring and t_start.
POSTS = np.dtype([("ring", "i8"), ("t", "i8")])
_NO_POSTS = np.empty(0, dtype=POSTS)


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
    channel's pairs are off. Sends beyond a channel's last receive stay unmatched. This is
    `MessageMatcher` fed `records` at once.
    """
    collectors = e.Collectors(catalogue)
    sends, receives = end_positions(records, collectors)
    matcher = MessageMatcher(np.dtype(np.int64))
    s, r = matcher.add(channel_ends(records, sends, collectors, sending=True), sends,
                       channel_ends(records, receives, collectors, sending=False), receives)
    return sorted(zip(s.tolist(), r.tolist()))


def message_ends(records: np.ndarray, catalogue) -> tuple[list, list]:
    """([(position, channel)] of the records that are a message's sending end, the same of its
    receiving ends (see `message_pairs`), in order of position; a channel is (communicator,
    source world rank, destination world rank, tag)."""
    collectors = e.Collectors(catalogue)
    out = []
    for positions, sending in zip(end_positions(records, collectors), (True, False)):
        ends = channel_ends(records, positions, collectors, sending)
        out.append([(i, (c, s, d, t)) for i, c, s, d, t in zip(positions.tolist(), ends["comm"].tolist(),
                                                              ends["src"].tolist(), ends["dst"].tolist(),
                                                              ends["tag"].tolist())])
    return out[0], out[1]


def end_positions(records: np.ndarray, collectors: e.Collectors) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the records that are a message's sending end, positions of its receiving ends;
    see `message_pairs`), each in order of position. `collectors`: the run's (encoding.Collectors)."""
    cid = collectors.index(records["collector"])
    op, flags, peer = records["op"], records["flags"], records["element"]
    usable = (collectors.p2p[cid] & (collectors.comm[cid] < LIMIT) & (collectors.rank[cid] < LIMIT)
              & (flags & _NOT_AN_END == 0) & (peer < LIMIT))
    request = flags & e.REQUEST != 0
    sending = usable & np.isin(op, _SENDS) & ~request
    receiving = usable & np.isin(op, _RECEIVES) & (request | ~np.isin(op, _POSTED_RECEIVES))
    return np.flatnonzero(sending), np.flatnonzero(receiving)


def channel_ends(records: np.ndarray, positions: np.ndarray, collectors: e.Collectors, sending: bool) -> np.ndarray:
    """The ENDS rows of the records at `positions` (message ends: `end_positions`): a sending end's
    source is its own rank and its destination the peer it names, a receiving end's the reverse."""
    cid = collectors.index(records["collector"][positions])
    out = np.empty(len(positions), dtype=ENDS)
    own, peer = collectors.rank[cid], records["element"][positions].astype(np.int64)
    out["comm"] = collectors.comm[cid]
    out["src"], out["dst"] = (own, peer) if sending else (peer, own)
    out["tag"] = records["arg"][positions]
    out["t"] = records["t_start"][positions]
    out["ring"] = cid
    return out


class MessageMatcher:
    """MPI's non-overtaking rule (see `message_pairs`), applied to message ends as their records
    come, a batch at a time (`add`), by one engine whatever the batches: the pairs it gives over
    any split of the records into batches, with `finish` at the end, are the pairs it gives for
    all of them at once.

    Ends are numbered per channel: sends as they come (a channel's sends are one rank's calls on
    one communicator, recorded in the order they began), receives in the order posted. A
    nonblocking receive's end is its request record, written when a completion call sees it done,
    which may be after receives posted later: so a receive waits (is held) while a receive posted
    before it on its ring is still open (its post seen, its request record not yet), and the held
    receives go on in t order once it closes. The k-th send of a channel and its k-th receive are
    one message. Each end comes with a payload (a row of an array of the dtype given), handed back
    beside its partner's.
    """

    def __init__(self, payload: np.dtype):
        self.payload = np.dtype(payload)
        self._channels: dict[tuple[int, int], int] = {}
        self._numbered = {True: np.zeros(0, np.int64), False: np.zeros(0, np.int64)}   # per channel, sends/receives
        self._sends = (np.zeros(0, np.int64), np.empty(0, self.payload))       # (channel << 32 | k, payload)
        self._receives = (np.zeros(0, np.int64), np.empty(0, self.payload))
        self._held = (np.empty(0, ENDS), np.zeros(0, np.int64), np.empty(0, self.payload))   # (end, seq, payload)
        self._open = np.empty(0, POSTS)
        self._seq = 0

    @property
    def unmatched(self) -> tuple[int, int]:
        """(sends, receives) waiting for their other end, receives held back included."""
        return len(self._sends[0]), len(self._receives[0]) + len(self._held[0])

    def add(self, sends: np.ndarray, send_payload: np.ndarray, receives: np.ndarray, receive_payload: np.ndarray,
            posts: np.ndarray = _NO_POSTS, closes: np.ndarray = _NO_POSTS) -> tuple[np.ndarray, np.ndarray]:
        """Take in a batch: message ends (ENDS rows, each with its payload row) and, for the order of
        receives, the nonblocking receives posted (`posts`) and ended (`closes`: their request
        records, whether ends or not) in it (POSTS rows). The (send payloads, receive payloads) of
        the messages whose two ends are now known."""
        self._open = _without(np.concatenate([self._open, posts]), closes)
        ends, seq, payload = self._held
        held = (np.concatenate([ends, receives]), np.concatenate([seq, self._seq + np.arange(len(receives))]),
                np.concatenate([payload, receive_payload]))
        self._seq += len(receives)
        go = _before_open(held[0], self._open)
        self._held = tuple(part[~go] for part in held)
        return self._match(sends, send_payload, *(part[go] for part in held))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """No more records will come: the held receives go on (a receive posted and never seen
        complete holds none back any longer); the pairs this makes, as `add`."""
        ends, seq, payload = self._held
        self._held = (ends[:0], seq[:0], payload[:0])
        self._open = self._open[:0]
        return self._match(np.empty(0, ENDS), np.empty(0, self.payload), ends, seq, payload)

    def _match(self, sends, send_payload, receives, seq, receive_payload):
        send_keys = self._number(sends, np.arange(len(sends)), True)
        receive_keys = self._number(receives, seq, False)
        keys, payload = (np.concatenate([self._sends[0], send_keys]),
                         np.concatenate([self._sends[1], send_payload]))
        rkeys, rpayload = (np.concatenate([self._receives[0], receive_keys]),
                           np.concatenate([self._receives[1], receive_payload]))
        _, si, ri = np.intersect1d(keys, rkeys, assume_unique=True, return_indices=True)
        left, rleft = np.ones(len(keys), bool), np.ones(len(rkeys), bool)
        left[si], rleft[ri] = False, False
        self._sends, self._receives = (keys[left], payload[left]), (rkeys[rleft], rpayload[rleft])
        return payload[si], rpayload[ri]

    def _number(self, ends: np.ndarray, seq: np.ndarray, sending: bool) -> np.ndarray:
        """channel << 32 | k for each end: the k-th of its channel's ends of this kind (in t order,
        then in the order they came)."""
        if not len(ends):
            return np.zeros(0, np.int64)
        channel = self._channel_ids(ends)
        order = np.lexsort((seq, ends["t"], channel))
        ordered = channel[order]
        first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        sizes = np.diff(np.r_[first, len(ordered)])
        counts = self._numbered[sending]
        k = counts[ordered] + np.arange(len(ordered)) - np.repeat(first, sizes)
        counts[ordered[first]] += sizes
        keys = np.empty(len(ends), np.int64)
        keys[order] = ordered << 32 | k
        return keys

    def _channel_ids(self, ends: np.ndarray) -> np.ndarray:
        """A dense id per channel (communicator, source, destination, tag), the same for the run's life."""
        ranks, at = np.unique(ends["comm"] << (2 * _BITS) | ends["src"] << _BITS | ends["dst"], return_inverse=True)
        channels, inverse = np.unique(at.reshape(-1) << 32 | ends["tag"], return_inverse=True)
        ids = np.array([self._channels.setdefault((r, t), len(self._channels))
                        for r, t in zip(ranks[channels >> 32].tolist(), (channels & 0xFFFFFFFF).tolist())],
                       dtype=np.int64)
        grown = len(self._channels) - len(self._numbered[True])
        if grown > 0:
            for kind in (True, False):
                self._numbered[kind] = np.concatenate([self._numbered[kind], np.zeros(grown, np.int64)])
        return ids[inverse.reshape(-1)]


def post_rows(ring: np.ndarray, t: np.ndarray) -> np.ndarray:
    """POSTS rows: posted receives (or their ends) by ring (collector id) and t_start."""
    out = np.empty(len(ring), POSTS)
    out["ring"], out["t"] = ring, t
    return out


def _without(posts: np.ndarray, closes: np.ndarray) -> np.ndarray:
    """`posts` less those that `closes` ends (the same ring and t)."""
    if not len(posts) or not len(closes):
        return posts
    both = np.concatenate([posts, closes])
    closing = np.r_[np.zeros(len(posts), np.int8), np.ones(len(closes), np.int8)]
    order = np.lexsort((closing, both["t"], both["ring"]))
    ring, t, kind = both["ring"][order], both["t"][order], closing[order]
    ended = (ring[:-1] == ring[1:]) & (t[:-1] == t[1:]) & (kind[:-1] == 0) & (kind[1:] == 1)
    gone = np.zeros(len(both), bool)
    gone[order[:-1][ended]] = True
    return posts[~gone[:len(posts)]]


def _before_open(ends: np.ndarray, open_posts: np.ndarray) -> np.ndarray:
    """Which `ends` may go on: those posted before every receive still open on their ring."""
    if not len(open_posts) or not len(ends):
        return np.ones(len(ends), bool)
    order = np.argsort(open_posts["ring"], kind="stable")
    rings, t = open_posts["ring"][order], open_posts["t"][order]
    first = np.flatnonzero(np.r_[True, rings[1:] != rings[:-1]])
    rings, earliest = rings[first], np.minimum.reduceat(t, first)
    at = np.minimum(np.searchsorted(rings, ends["ring"]), len(rings) - 1)
    held = (rings[at] == ends["ring"]) & (ends["t"] >= earliest[at])
    return ~held
