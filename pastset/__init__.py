"""PastSet: a Linda-style tuple space of named, ordered elements, in-process or over ZeroMQ."""

from .client import Client, RemoteElement, as_batch
from .element import Element, ElementInfo
from .errors import (AuthError, BadArgument, EventSpaceError, Expired, LimitExceeded, NotAnswering, PastSetError, ProtocolError,
                     Refused, ServerGone, TemplateMismatch, Timeout, UnknownElement, register_error)
from .fanout import Fanout
from .linda import ANY, Linda
from .local import LocalClient
from .protocol import Limits, encodable
from .security import Security
from .server import TupleServer
from .template import Template
from .transport import Transport, connect

__all__ = [
    "TupleServer", "connect", "Transport", "Client", "LocalClient", "Element", "RemoteElement", "ElementInfo",
    "Template", "Fanout", "Limits", "Linda", "ANY", "Security", "encodable", "register_error", "as_batch",
    "EventSpaceError", "PastSetError", "UnknownElement", "TemplateMismatch", "Expired", "Timeout", "ServerGone",
    "NotAnswering", "ProtocolError", "LimitExceeded", "BadArgument", "AuthError", "Refused",
]
