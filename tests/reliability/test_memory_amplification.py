"""Requests of a few bytes that once made a node server process allocate gigabytes: each is now refused
with LimitExceeded naming the limit, the server's peak memory stays within its budget, and a bystander
client's moves are never stalled. Every attack runs against a real `pastset.TupleServer` process with
the default `pastset.Limits`; each test prints what it measured."""

from __future__ import annotations

import time

import pytest
import zmq

import pastset
from pastset import protocol as p
from polling import until
from server_attacks import Bystander, Peer, memory_kb

TRACE = "=HHIIIIQQ"
MIB = 1 << 20
BUDGET_MIB = 1024        # pastset.Limits().max_memory, the default memory budget
STALL_S = 1.0            # "not stalled": ten times the 100 ms a bystander may wait
END = 2 ** 62            # a read_range end past anything held


def grown_mib(pid: int, before: dict) -> float:
    """How far the process's peak resident memory rose above its resident memory `before`, in MiB."""
    return (memory_kb(pid)["VmHWM"] - before["VmRSS"]) / 1024


@pytest.fixture
def attacked(spawn_server):
    """(node server process, zmq context) for one attack."""
    server = spawn_server()
    ctx = zmq.Context()
    yield server, ctx
    ctx.destroy(linger=0)


def test_delta_cannot_grow_a_ring_past_the_ring_limit(attacked):
    """Attack: delta(30_000_000) on a trace element, a 30-byte request for a 1 GB ring."""
    server, _ = attacked
    with pastset.connect(server.endpoint) as client:
        ring = client.enter("g", TRACE)
        before = memory_kb(server.proc.pid)
        try:
            ring.delta(30_000_000)
            refused = None
        except pastset.LimitExceeded as exc:
            refused = exc
        grown = grown_mib(server.proc.pid, before)
        print(f"delta(30_000_000): server peak +{grown:.0f} MiB; {refused}")
        assert refused is not None and "Limits.max_ring" in str(refused), "the 1 GB ring was allocated"
        assert grown < 64
        assert ring.delta() is None and ring.move((1, 0, 0, 0, 0, 0, 0, 0)) == 0   # nothing else changed
        assert ring.delta(1_000) == 1_000                                            # a sane bound still works


def test_wide_binary_records_cannot_make_the_server_allocate_gigabytes(attacked):
    """Attack: 8 x enter(f"b{i}", "=8388608Q", keep=1), 160 bytes of requests for 1.5 GiB."""
    server, ctx = attacked
    peer = Peer(ctx, server.endpoint)
    before = memory_kb(server.proc.pid)
    replies = []
    for i in range(8):
        reply, _, _ = peer.ask(i, p.ENTER, f"b{i}", "=8388608Q", 1, None)
        replies.append(reply)
        if grown_mib(server.proc.pid, before) > 1536:
            break  # enough to fail: stop before the machine suffers
    grown = grown_mib(server.proc.pid, before)
    print(f"8 x enter('=8388608Q', keep=1): server peak +{grown:.0f} MiB; first reply {replies[0]}")
    assert all(r[1] == p.ERROR for r in replies), "a 64 MiB record of 8 million fields was accepted"
    assert grown < 64


def test_rings_within_the_ring_limit_are_held_to_the_memory_budget(attacked):
    """Attack: 24 x enter(f"r{i}", "=33554432s", keep=1), each a legal 64 MiB ring: 1.5 GiB in all."""
    server, ctx = attacked
    peer = Peer(ctx, server.endpoint)
    with Bystander(server.endpoint) as bystander:
        before = memory_kb(server.proc.pid)
        made, refusals = [], []
        for i in range(24):
            reply, _, _ = peer.ask(i, p.ENTER, f"r{i}", "=33554432s", 1, None)
            (made if reply[1] == p.OK else refusals).append(reply)
            if grown_mib(server.proc.pid, before) > BUDGET_MIB + 512:
                break
        grown = grown_mib(server.proc.pid, before)
        seen = bystander.finish()
    print(f"24 x 64 MiB rings: {len(made)} made, server peak +{grown:.0f} MiB; bystander worst "
          f"{seen['worst_s'] * 1000:.0f} ms over {seen['moves']} moves; refusal: {refusals[:1]}")
    assert refusals, "every ring was allocated: nothing holds the server to a memory budget"
    assert refusals[0][2] == "LimitExceeded" and "Limits.max_memory" in refusals[0][3]
    assert grown < BUDGET_MIB + 128
    assert seen["errors"] == [] and seen["worst_s"] < STALL_S
    for i in range(len(made)):                       # the budget comes back with the rings
        assert peer.ask(100 + i, p.DELETE, f"r{i}")[0][1] == p.OK
    assert peer.ask(200, p.ENTER, "again", "=33554432s", 1, None)[0][1] == p.OK


def move_until_refused(pid: int, element, values, most: int) -> tuple[Exception | None, float]:
    """Move `values` into `element` until the server refuses (or has grown far past its budget):
    (the refusal, the server's peak growth in MiB)."""
    before = memory_kb(pid)
    for _ in range(most):
        try:
            element.move(values)
        except pastset.LimitExceeded as exc:
            return exc, grown_mib(pid, before)
        if grown_mib(pid, before) > BUDGET_MIB + 512:
            break
    return None, grown_mib(pid, before)


def test_an_unbounded_typed_element_is_held_to_the_memory_budget(attacked):
    """Attack: 8 MB tuples moved into an element without keep or delta, until the server gives out."""
    server, _ = attacked
    blob = b"x" * (8 * MIB)
    with pastset.connect(server.endpoint) as client:
        hoard = client.enter("hoard", ["bytes"])
        refused, grown = move_until_refused(server.proc.pid, hoard, (blob,), BUDGET_MIB // 8 + 64)
        held = hoard.last()
        print(f"8 MB moves into an unbounded element: {held} held, server peak +{grown:.0f} MiB; {refused}")
        assert refused is not None and "Limits.max_memory" in str(refused), "the element grew without bound"
        assert grown < BUDGET_MIB + 128
        assert hoard.last() == held and hoard.observe(held - 1) == (blob,)   # the refused move changed nothing
        client.delete("hoard")
        assert client.enter("after", ["bytes"]).move((blob,)) == 0             # the budget came back


def test_an_any_field_of_many_small_objects_is_counted_as_what_it_holds(attacked):
    """Attack: moves of [[]] * 290_000 into an element of ["any"]: 290 KB on the wire, 18 MB of objects
    (a million was 1 MB and 64 MB: one request may decode to at most 300,000 values now)."""
    server, _ = attacked
    lists = [[]] * 290_000
    with pastset.connect(server.endpoint, gone_after=30) as client:   # each move takes the server long
        hoard = client.enter("objects", ["any"])
        refused, grown = move_until_refused(server.proc.pid, hoard, (lists,), BUDGET_MIB // 16 + 16)
        print(f"moves of 290,000 empty lists: {hoard.last()} held, server peak +{grown:.0f} MiB; {refused}")
        assert refused is not None and "Limits.max_memory" in str(refused), "the element grew without bound"
        assert grown < BUDGET_MIB + 192     # the budget, and the request being decoded


def ten_megabyte_element(client, op):
    """An element holding one 10 MB tuple: typed for latest_many and range_many, binary for latest_records."""
    if op == p.LATEST_RECORDS:
        element = client.enter("ten", "=10000000s", keep=1)
    else:
        element = client.enter("ten", ["bytes"])
    element.move((b"y" * 10_000_000,))
    return element


# batch read -> (operation, its arguments for a list of element ids)
BATCHES = {
    "latest_many": (p.LATEST_MANY, lambda refs: (refs, 1)),
    "range_many": (p.RANGE_MANY, lambda refs: (refs, [0] * len(refs), END)),
    "latest_records": (p.LATEST_RECORDS, lambda refs: (refs, 1)),
}


@pytest.mark.parametrize("batch", list(BATCHES))
def test_a_batch_read_cannot_amplify_one_tuple_into_a_gigabyte_reply(attacked, batch):
    """Attack: one 10 MB tuple held, then a ~100-byte batch read naming its element 100 times (1 GB)."""
    server, ctx = attacked
    op, args = BATCHES[batch]
    with pastset.connect(server.endpoint) as client:
        eid = ten_megabyte_element(client, op).id
        peer = Peer(ctx, server.endpoint)
        with Bystander(server.endpoint) as bystander:
            time.sleep(0.3)   # the bystander moves a while before the attack: its worst move is timed over it
            before = memory_kb(server.proc.pid)
            reply, size, took = peer.ask(1, op, *args([eid] * 100))
            time.sleep(0.3)   # and after it, while the server gives back what it took
            grown = grown_mib(server.proc.pid, before)
            seen = bystander.finish()
        print(f"{batch}([eid] * 100) of a 10 MB tuple: reply of {size:,} bytes in {took * 1000:.0f} ms, "
              f"server peak +{grown:.0f} MiB, bystander worst {seen['worst_s'] * 1000:.0f} ms over "
              f"{seen['moves']} moves, errors {seen['errors']}; reply {reply[:3]}")
        assert reply[1] == p.ERROR and reply[2] == "LimitExceeded" and "Limits.max_reply" in reply[3], \
            f"a {size:,}-byte reply was built"
        assert grown < 128
        assert took < STALL_S
        assert seen["errors"] == [] and seen["worst_s"] < STALL_S
        assert peer.ask(2, op, *args([eid]))[0][1] == p.OK      # once is fine


def test_replies_a_client_does_not_read_are_held_to_a_share(attacked):
    """Attack: 100 pipelined latest() of a 10 MB tuple by a peer that never reads its replies (1 GB)."""
    server, ctx = attacked
    with pastset.connect(server.endpoint) as client:
        eid = ten_megabyte_element(client, p.LATEST).id
        hoarder = Peer(ctx, server.endpoint, rcvhwm=1)
        with Bystander(server.endpoint) as bystander:
            before = memory_kb(server.proc.pid)
            for rid in range(100):
                hoarder.request(rid, p.LATEST, eid, 1)
            grown, last = 0.0, -1.0
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and grown < BUDGET_MIB + 512:
                time.sleep(1.0)   # growth is measured per second, until it stops
                last, grown = grown, grown_mib(server.proc.pid, before)
                if grown - last < 1:
                    break   # settled
            seen = bystander.finish()
        print(f"100 unread latest() replies of 10 MB: server peak +{grown:.0f} MiB; bystander worst "
              f"{seen['worst_s'] * 1000:.0f} ms over {seen['moves']} moves, errors {seen['errors']}")
        assert grown < 256, "the server queued the replies of a peer that reads none of them"
        assert seen["errors"] == [] and seen["worst_s"] < STALL_S
        hoarder.close()                                     # its queued replies go with it
        time.sleep(0.5)   # the server drops them meanwhile (nothing shows it): the element must be intact after
        start, items = client.element("ten").latest(1)
        assert start == 0 and items == [(b"y" * 10_000_000,)]


def test_small_replies_a_client_does_not_read_are_counted_and_capped(attacked):
    """Attack: 3,000 pipelined latest() of a 1,000,000-byte tuple (18 KB of requests; each reply under a
    megabyte, so none was counted) by a peer that never reads its replies: 3 GB queued; then it leaves."""
    server, ctx = attacked
    pid = server.proc.pid
    with pastset.connect(server.endpoint) as client:
        near = client.enter("near", ["bytes"])
        near.move((b"n" * 1_000_000,))
        done = client.enter("done", ["int"])
        hoarder = Peer(ctx, server.endpoint, rcvhwm=1)
        with Bystander(server.endpoint) as bystander:
            before = memory_kb(pid)
            for rid in range(3_000):
                hoarder.request(rid, p.LATEST, near.id, 1)
                if rid % 100 == 99 and grown_mib(pid, before) > BUDGET_MIB + 512:
                    break  # enough to fail: stop before the machine suffers
            hoarder.request(3_000, p.MOVE, done.id, [1], None)   # answered after all of them
            until(lambda: done.last() == 1 or grown_mib(pid, before) > BUDGET_MIB + 512, timeout=60,
                  what="the requests answered (or the server grown past its budget)")
            grown = grown_mib(pid, before)
            seen = bystander.finish()
        print(f"3,000 unread latest() replies of 1 MB: server peak +{grown:.0f} MiB; bystander worst "
              f"{seen['worst_s'] * 1000:.0f} ms over {seen['moves']} moves, errors {seen['errors']}")
        assert grown < 256, "the server queued the replies of a peer that reads none of them"
        assert done.last() == 1, "the server did not get through the requests"
        assert seen["errors"] == [] and seen["worst_s"] < STALL_S
        hoarder.close()                                      # what it left unread is given back
        until(lambda: memory_kb(pid)["VmRSS"] < before["VmRSS"] + 64 * 1024, timeout=15,
              what=f"the memory of the replies given back when their client left (resident {before['VmRSS']:,} kB "
                   "before, 64 MiB more allowed)")
        print(f"resident after it left: {memory_kb(pid)['VmRSS'] / 1024:.0f} MiB, "
              f"{before['VmRSS'] / 1024:.0f} MiB before")
        assert near.latest(1) == (0, [(b"n" * 1_000_000,)])


def many_empty_maps(eid: int, lists: int) -> bytes:
    """A 16 MiB move whose value is `lists` arrays of empty maps (one byte each on the wire, some 64 in
    memory): 16 million Python dicts if decoded whole."""
    per_list = (15 * MIB) // lists
    value = b"".join(b"\xdd" + per_list.to_bytes(4, "big") + b"\x80" * per_list for _ in range(lists))
    return b"\x95\x01\x03" + p.pack(eid) + b"\x91\xdd" + lists.to_bytes(4, "big") + value + b"\xc0"


@pytest.mark.parametrize("lists", [1, 64])
def test_a_frame_of_empty_maps_cannot_hold_the_loop_or_take_a_gigabyte(attacked, lists):
    """Attack: 16 MiB frames of empty maps (in one array, refused at its header; or in 64 of 245,760,
    each under the limit, counted as they are built), four in a row: each once took the server's
    loop 1.0-1.5 s and 1.26 GB."""
    server, ctx = attacked
    pid = server.proc.pid
    with pastset.connect(server.endpoint) as client:
        eid = client.enter("maps", ["any"]).id
        frame = many_empty_maps(eid, lists)
        assert len(frame) <= pastset.Limits().max_frame
        peer = Peer(ctx, server.endpoint)
        with Bystander(server.endpoint) as bystander:
            before = memory_kb(pid)
            replies, slowest = [], 0.0
            for _ in range(4):
                started = time.perf_counter()
                peer.sock.send(frame)
                replies.append(peer.reply()[0])
                slowest = max(slowest, time.perf_counter() - started)
            grown = grown_mib(pid, before)
            seen = bystander.finish()
        print(f"4 frames of empty maps in {lists} array(s): slowest reply {slowest * 1000:.0f} ms, server peak "
              f"+{grown:.0f} MiB, bystander worst {seen['worst_s'] * 1000:.0f} ms; reply {replies[0]}")
        assert all(r[1] == p.ERROR and r[2] == "LimitExceeded" and "Limits.max_objects" in r[3] for r in replies)
        assert grown < 160, "the frame was decoded whole"
        assert slowest < STALL_S
        assert seen["errors"] == [] and seen["worst_s"] < STALL_S


def test_slow_readers_of_big_replies_cost_the_server_two_replies_each(attacked):
    """Attack: 8 connections each ask 12 times for a 10 MB tuple and read nothing. Each big reply the
    server builds is fresh memory (a page fault every 4 KiB: 25-45 ms for 10 MB on a virtual machine),
    so 96 of them (a client could leave 128 MiB unread) held the loop for seconds and took a gigabyte;
    now a client may leave two replies of a megabyte or more unread, and is refused the rest."""
    server, ctx = attacked
    pid = server.proc.pid
    with pastset.connect(server.endpoint) as client:
        eid = ten_megabyte_element(client, p.LATEST).id
        done = client.enter("done", ["int"])
        readers = [Peer(ctx, server.endpoint, rcvhwm=1) for _ in range(8)]
        with Bystander(server.endpoint) as bystander:
            before = memory_kb(pid)
            for rid in range(12):
                for reader in readers:
                    reader.request(rid, p.LATEST, eid, 1)
            for reader in readers:   # answered after all of its reads
                reader.request(12, p.MOVE, done.id, [1], None)
            until(lambda: done.last() == len(readers) or grown_mib(pid, before) > BUDGET_MIB + 512, timeout=60,
                  what="every reader's requests answered (or the server grown past its budget)")
            grown = grown_mib(pid, before)
            seen = bystander.finish()
        print(f"8 slow readers x 12 latest() of 10 MB: server peak +{grown:.0f} MiB; bystander worst "
              f"{seen['worst_s'] * 1000:.0f} ms over {seen['moves']} moves, errors {seen['errors']}")
        assert grown < 256, "the server built the big replies of readers that read none of them"
        assert done.last() == len(readers)
        assert seen["errors"] == [] and seen["worst_s"] < STALL_S
        for reader in readers:
            reader.close()
        start, items = client.element("ten").latest(1)
        assert start == 0 and items == [(b"y" * 10_000_000,)]
