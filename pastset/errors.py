"""The PastSet error hierarchy: every failure a caller can see is one of these."""


class PastSetError(Exception):
    """Base of every PastSet error; carried over the wire by class name and message."""


class UnknownElement(PastSetError):
    """The named element does not exist (never entered, or deleted)."""


class TemplateMismatch(PastSetError):
    """A tuple or template does not fit the element's template; the message names the field."""


class Expired(PastSetError):
    """The index was discarded (consumed, axed, dropped by `keep`), taken, or is not valid."""


class Timeout(PastSetError):
    """A blocking operation did not complete within its timeout."""


class ServerGone(PastSetError):
    """The node server did not answer: it is down, unreachable, or stopped responding."""


class NotAnswering(ServerGone):
    """The node server's connection is open but it did not answer for the caller's grace: it may
    be paused, swapping or overloaded rather than dead (a dead one is plain ServerGone, soon)."""


class ProtocolError(PastSetError):
    """A request was malformed, too large, or named an unknown operation or bad arguments."""


class LimitExceeded(ProtocolError):
    """A server limit (`pastset.Limits`: frame or reply size, element count, memory budget, parked
    requests, a client's share) was reached; the message names it and says what to do."""


class BadArgument(PastSetError, ValueError):
    """An argument has the wrong type or value (a negative keep, a timeout that is not a number)."""


class AuthError(PastSetError):
    """Authentication cannot happen: CURVE keys are missing or unusable, or the peer refused them."""


class Refused(ServerGone, AuthError):
    """The node server refused this client's security handshake: it uses CURVE and the client has
    no keys, or a key it does not authorise, or a wrong server key (or CURVE on the client only).
    Never on the wire: the client learns it from its connection, not from a reply."""


# The wire carries errors by name; only these names are ever turned back into exceptions.
ERRORS_BY_NAME = {
    cls.__name__: cls
    for cls in (
        PastSetError, UnknownElement, TemplateMismatch, Expired, Timeout,
        ServerGone, NotAnswering, ProtocolError, LimitExceeded, BadArgument, AuthError,
    )
}
