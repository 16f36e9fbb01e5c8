"""Fixtures for the PastSet tests: raw ZeroMQ peers, and calls run in background threads."""

from __future__ import annotations

import pytest
import zmq

from harness import Background, RawPeer


@pytest.fixture
def raw_peer():
    """`raw_peer(endpoint)` -> a RawPeer; every peer is closed at teardown."""
    ctx = zmq.Context()
    peers: list[RawPeer] = []

    def make(endpoint: str) -> RawPeer:
        peer = RawPeer(ctx, endpoint)
        peers.append(peer)
        return peer

    yield make
    for peer in peers:
        peer.close()
    ctx.destroy(linger=0)


@pytest.fixture
def background():
    """`background(fn, *args)` -> a Background; teardown checks that no call is left running."""
    started: list[Background] = []

    def start(fn, *args, **kwargs) -> Background:
        job = Background(fn, *args, **kwargs)
        started.append(job)
        return job

    yield start
    for job in started:
        job.join(30)
    assert not any(job.running for job in started), "a background call never returned"
