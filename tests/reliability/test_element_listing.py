"""Listing the elements of a node server that hosts 60,000 of them (`eventspace ps stat`,
`client.elements()`): one ELEMENTS request once took the server's loop half a second, so that 35
listings from 7 connections stalled a bystander for seconds. Now the server lists them a page at a
time, each page a few milliseconds, and the client asks page after page."""

from __future__ import annotations

import threading

import pytest
import zmq

import pastset
from server_attacks import Bystander, fill

ELEMENTS = 60_000
LISTERS = 7
STALL_S = 1.0            # "not stalled": ten times the 100 ms a bystander may wait


@pytest.mark.slow   # 10-25 s: 60,000 elements entered, and listed 14 times
def test_listing_60k_elements_from_7_connections_does_not_stall_a_bystander(spawn_server):
    """Attack: 60,000 elements on one server, then 7 connections list them all, twice each."""
    server = spawn_server()
    ctx = zmq.Context()
    try:
        fill(ctx, server.endpoint, [f"element/{i:05d}" for i in range(ELEMENTS)])
    finally:
        ctx.destroy(linger=0)
    listed: list[int] = []
    errors: list[BaseException] = []

    def list_twice():
        try:
            with pastset.connect(server.endpoint, timeout=30) as client:
                for _ in range(2):
                    listed.append(sum(1 for info in client.elements() if info.name.startswith("element/")))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    with Bystander(server.endpoint) as bystander:
        listers = [threading.Thread(target=list_twice) for _ in range(LISTERS)]
        for lister in listers:
            lister.start()
        for lister in listers:
            lister.join(120)
        seen = bystander.finish()
    print(f"{2 * LISTERS} listings of {ELEMENTS:,} elements: bystander worst {seen['worst_s'] * 1000:.0f} ms over "
          f"{seen['moves']} moves, errors {seen['errors']}")
    assert errors == [] and listed == [ELEMENTS] * 2 * LISTERS
    assert seen["errors"] == [] and seen["worst_s"] < STALL_S
