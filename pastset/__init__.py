"""PastSet: a Linda-style tuple space of named, ordered elements, in-process or over ZeroMQ."""

from .client import Client, RemoteElement, connect
from .element import Element, ElementInfo
from .errors import (AuthError, BadArgument, Expired, LimitExceeded, NotAnswering, PastSetError, ProtocolError,
                     Refused, ServerGone, TemplateMismatch, Timeout, UnknownElement)
from .linda import ANY, Linda
from .protocol import Limits
from .security import Security
from .server import TupleServer
from .template import Template

__all__ = [
    "TupleServer", "connect", "Client", "Element", "RemoteElement", "ElementInfo", "Template",
    "Limits", "Linda", "ANY", "Security",
    "PastSetError", "UnknownElement", "TemplateMismatch", "Expired", "Timeout", "ServerGone",
    "NotAnswering", "ProtocolError", "LimitExceeded", "BadArgument", "AuthError", "Refused",
]
