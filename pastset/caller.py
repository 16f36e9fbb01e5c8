"""Who makes a hosted call: a client connection of an endpoint (and its CURVE key), or this process."""

from __future__ import annotations

from typing import NamedTuple


class Caller(NamedTuple):
    """Who makes a hosted call (see `TupleServer.host`): `connection`, one client connection of one
    endpoint (None: a caller in this process), and `key`, the CURVE public key (Z85 text) that client
    authenticated with where the endpoint serves CURVE (None otherwise)."""

    connection: tuple | None = None
    key: str | None = None

    @property
    def in_process(self) -> bool:
        return self.connection is None


IN_PROCESS = Caller()
