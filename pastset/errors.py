"""The error hierarchy: every failure a caller of PastSet can see is one of these, under the one
root of every layer's errors."""


class EventSpaceError(Exception):
    """The root of every error EventSpace's layers raise on purpose: the tuple space's
    (`PastSetError`), PATHS's (`paths.PathsError`) and those above. Defined here, at the lowest
    layer, because the wire carries any of them by class name and message (`register_error`), and
    pastset imports nothing above itself."""


class PastSetError(EventSpaceError):
    """Base of every PastSet error: the tuple space, its server and its transport."""


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


def hosted_failure(name: str, exc: Exception) -> ProtocolError:
    """What the caller of hosted callable `name` gets when it failed with an error that is not a
    PastSetError (a bug in it), in-process and remote alike."""
    return ProtocolError(f"hosted call {name} failed: {type(exc).__name__}: {exc}")


# The wire carries errors by name; only these names are ever turned back into exceptions.
ERRORS_BY_NAME = {
    cls.__name__: cls
    for cls in (
        EventSpaceError, PastSetError, UnknownElement, TemplateMismatch, Expired, Timeout,
        ServerGone, NotAnswering, ProtocolError, LimitExceeded, BadArgument, AuthError,
    )
}


def register_error(cls: type[EventSpaceError]) -> type[EventSpaceError]:
    """Let an error class defined above PastSet (e.g. by PATHS) travel the wire by name."""
    ERRORS_BY_NAME.setdefault(cls.__name__, cls)
    return cls
