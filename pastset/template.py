"""Templates: the field types of an element's tuples, typed (msgpack fields) or binary (a struct)."""

from __future__ import annotations

import gc
import re
import struct
import sys
from dataclasses import dataclass, field

import msgpack

from .errors import TemplateMismatch

# Field type name -> the Python types a value of that field may have.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "str": (str,),
    "bytes": (bytes,),
    "bool": (bool,),
}
_TYPE_NAMES = {int: "int", float: "float", str: "str", bytes: "bytes", bool: "bool"}
_MSGPACK_INTS = range(-(2 ** 63), 2 ** 64)
FIELD_NAMES = (*_FIELD_TYPES, "any")

# A template's fields are objects of their own (a tuple with one entry per field, kept by every element
# of the template): a struct format of a few bytes such as "=8388608Q" must not cost 64 MiB of them.
# A record of many bytes is one field ("=65536s"), not many.
MAX_FIELDS = 1024
_MAX_FORMAT = 8 * MAX_FIELDS      # characters in a struct format, checked before it is parsed
_TOKENS = re.compile(r"(\d*)([a-zA-Z?])")   # a struct format's (count, code) pairs


@dataclass(frozen=True)
class Template:
    """An ordered list of field types.

    Typed: `Template.typed("int", "bytes")`; fields are msgpack-encodable values and `check`
    verifies each one. Binary: `Template.binary("=HHIIIIQQ")`; a fixed-size record in native
    byte order, stored packed. `Template.of(spec)` accepts either form as plain data (a list of
    field names, or a struct format string starting with "="), which is also how templates
    travel on the wire.
    """

    fields: tuple[str, ...] = ()
    fmt: str | None = None
    _struct: struct.Struct | None = field(default=None, compare=False, repr=False)

    @classmethod
    def typed(cls, *fields: str | type) -> Template:
        if len(fields) > MAX_FIELDS:
            raise TemplateMismatch(f"a template has at most {MAX_FIELDS} fields, not {len(fields)}")
        names = []
        for i, f in enumerate(fields):
            name = _TYPE_NAMES.get(f, f) if isinstance(f, type) else f
            if name not in FIELD_NAMES:
                raise TemplateMismatch(
                    f"template field {i}: unknown type {f!r}; use one of {', '.join(FIELD_NAMES)}"
                )
            names.append(name)
        if not names:
            raise TemplateMismatch("a typed template needs at least one field")
        return cls(fields=tuple(names))

    @classmethod
    def binary(cls, fmt: str) -> Template:
        if not isinstance(fmt, str) or not fmt.startswith("="):
            raise TemplateMismatch(
                f"binary template {fmt!r}: a struct format in native byte order must start with '='"
            )
        if len(fmt) > _MAX_FORMAT:
            raise TemplateMismatch(f"binary template {fmt:.40}...: a struct format has at most {_MAX_FORMAT} "
                                   f"characters, not {len(fmt)}")
        count = sum(1 if code in "sp" else int(n or 1) for n, code in _TOKENS.findall(fmt) if code != "x")
        if count > MAX_FIELDS:
            raise TemplateMismatch(f"binary template {fmt!r} has {count} fields; a template has at most "
                                   f"{MAX_FIELDS} (a record of many bytes is one field: '=65536s')")
        try:
            st = struct.Struct(fmt)
        except struct.error as exc:
            raise TemplateMismatch(f"binary template {fmt!r}: {exc}") from None
        if st.size == 0:
            raise TemplateMismatch(f"binary template {fmt!r} has no fields")
        return cls(fields=_struct_fields(fmt), fmt=fmt, _struct=st)

    @classmethod
    def of(cls, spec) -> Template:
        """A template from a Template, a list/tuple of field types, or a binary struct format."""
        if isinstance(spec, Template):
            return spec
        if isinstance(spec, str):
            return cls.binary(spec)
        if isinstance(spec, (list, tuple)):
            return cls.typed(*spec)
        raise TemplateMismatch(
            f"template {spec!r}: give a list of field types (e.g. ['int', 'bytes']) "
            "or a struct format starting with '=' (e.g. '=HHIIIIQQ')"
        )

    @property
    def is_binary(self) -> bool:
        return self.fmt is not None

    @property
    def record_size(self) -> int:
        """Bytes per record (binary templates only)."""
        return self._struct.size

    def sizer(self):
        """A function of one tuple of this template giving its size in bytes as it crosses the wire:
        `record_size` for a binary template; for a typed one the length of its msgpack encoding
        (array header, then each field's header and value), computed without encoding it.

        The tuple must be one the template accepts (see `check`). Cheap, as it runs in every
        collector: fixed sizes are summed once, here; an int's size depends on its magnitude, a
        str's and a bytes' on their length; only `any` fields are encoded to be measured.
        """
        if self.is_binary:
            size = self.record_size
            return lambda values: size
        count = len(self.fields)
        fixed = 1 if count < 16 else 3 if count < 65536 else 5   # the array header
        terms = []
        for i, name in enumerate(self.fields):
            if name == "bool":
                fixed += 1
            else:
                terms.append(_FIELD_SIZE[name].format(i=i))
        # One expression per template, as namedtuple and dataclasses build their methods: a call per
        # field would cost more than the collector's whole write.
        source = f"def size(v):\n    return {' + '.join([str(fixed), *terms])}\n"
        scope = {"_text": _text_size, "_any": _any_size}
        exec(source, scope)
        return scope["size"]

    @property
    def spec(self):
        """Plain-data form for the wire and for display: the struct format, or the field list."""
        return self.fmt if self.fmt is not None else list(self.fields)

    def __str__(self) -> str:
        return self.fmt if self.fmt is not None else "[" + ", ".join(self.fields) + "]"

    @property
    def nbytes(self) -> int:
        """About the bytes this template occupies in memory (its field names and format)."""
        return 200 + 8 * len(self.fields) + len(self.fmt or "")

    def check(self, values) -> tuple:
        """The tuple, validated against this template; raises TemplateMismatch naming the field."""
        return self.checked(values)[0]

    def checked(self, values) -> tuple[tuple, int]:
        """(the tuple, validated as by `check`, its payload in bytes): the bytes of its str and bytes
        fields, and for an `any` field what its objects take in memory (see `_held_size`: an empty map
        is one byte encoded and 64 in memory). Fields of fixed size count nothing."""
        if not isinstance(values, (tuple, list)):
            raise TemplateMismatch(
                f"expected a tuple of {len(self.fields)} fields {self}, got {type(values).__name__}"
            )
        if len(values) != len(self.fields):
            raise TemplateMismatch(
                f"expected {len(self.fields)} fields {self}, got {len(values)}"
            )
        if self.fmt is not None:
            self.pack(values)
            return tuple(values), self._struct.size
        nbytes = 0
        for i, (name, value) in enumerate(zip(self.fields, values)):
            if name == "any":
                try:
                    # As deep as the deepest reply carries it (latest_many), so that it can be read back.
                    msgpack.packb([[[[[value]]]]], use_bin_type=True)
                    nbytes += _held_size(value)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise TemplateMismatch(
                        f"field {i} (any): {type(value).__name__} is not msgpack-encodable ({exc})"
                    ) from None
                continue
            # bool is an int in Python; an int field must not silently take one.
            if not isinstance(value, _FIELD_TYPES[name]) or (name != "bool" and isinstance(value, bool)):
                raise TemplateMismatch(
                    f"field {i}: expected {name}, got {type(value).__name__} ({value!r:.40})"
                )
            # Every tuple must be able to travel the wire, whoever moved it.
            if isinstance(value, int):
                if value not in _MSGPACK_INTS:
                    raise TemplateMismatch(f"field {i} ({name}): {value} does not fit in 64 bits")
            elif name == "bytes":
                nbytes += len(value)
            elif name == "str":
                if value.isascii():
                    nbytes += len(value)
                    continue
                try:
                    nbytes += len(value.encode())
                except UnicodeEncodeError as exc:
                    raise TemplateMismatch(f"field {i} (str): {value!r:.40} is not valid text ({exc.reason})") from None
        return tuple(values), nbytes

    def pack(self, values) -> bytes:
        """One binary record; raises TemplateMismatch naming the first field that does not fit."""
        try:
            return self._struct.pack(*values)
        except struct.error:
            raise self._mismatch(values) from None

    def unpack(self, record: bytes) -> tuple:
        """The values of one packed record; TemplateMismatch unless it is exactly `record_size` bytes."""
        if self._struct is None:
            raise TemplateMismatch(f"template {self} is typed: packed records need a binary template")
        if not isinstance(record, (bytes, bytearray, memoryview)) or len(record) != self._struct.size:
            got = f"{len(record)} bytes" if isinstance(record, (bytes, bytearray, memoryview)) else type(record).__name__
            raise TemplateMismatch(f"a record of {self} is {self._struct.size} bytes, got {got}")
        return self._struct.unpack(record)

    def _mismatch(self, values) -> TemplateMismatch:
        if not isinstance(values, (tuple, list)):
            return TemplateMismatch(
                f"expected a tuple of {len(self.fields)} fields {self}, got {type(values).__name__}"
            )
        if len(values) != len(self.fields):
            return TemplateMismatch(f"expected {len(self.fields)} fields {self}, got {len(values)}")
        for i, (code, value) in enumerate(zip(self.fields, values)):
            try:
                struct.pack("=" + code, value)
            except struct.error as exc:
                return TemplateMismatch(
                    f"field {i} ({code!r} in {self.fmt}): {type(value).__name__} {value!r:.40} does not fit: {exc}"
                )
        return TemplateMismatch(f"values {values!r:.80} do not fit {self.fmt}")


# The msgpack size of one field value of each type, as an expression of the tuple `v` (see sizer),
# with msgpack's header rules written out (msgpack-python packs an int >= 0 as the smallest uint,
# one below 0 as the smallest int, a float, numpy.float64 too, as a float64): plain comparisons.
_INT = ("1 if -32 <= {x} < 128 else 2 if -128 <= x < 256 else 3 if -32768 <= x < 65536 "
        "else 5 if -2147483648 <= x < 4294967296 else 9")
_STR_HEAD = "(1 if n < 32 else 2 if n < 256 else 3 if n < 65536 else 5)"
_FIELD_SIZE = {
    "int": "(" + _INT.format(x="(x := v[{i}])") + ")",
    "float": "(9 if isinstance(x := v[{i}], float) else " + _INT.format(x="x") + ")",  # or an int
    "str": "((n := len(x)) + " + _STR_HEAD + " if (x := v[{i}]).isascii() else _text(x))",
    "bytes": "((n := len(v[{i}])) + (2 if n < 256 else 3 if n < 65536 else 5))",
    "any": "_any(v[{i}])",
}


def _text_size(text: str) -> int:
    """msgpack bytes of a str that is not ASCII (its UTF-8 length, and the header for that length)."""
    n = len(text.encode())
    return n + (1 if n < 32 else 2 if n < 256 else 3 if n < 65536 else 5)


def _any_size(value) -> int:
    return len(msgpack.packb(value, use_bin_type=True))


def _struct_fields(fmt: str) -> tuple[str, ...]:
    """One struct code per field: '=2I4sQ' -> ('I', 'I', '4s', 'Q'); pad bytes are no field."""
    fields: list[str] = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", fmt):
        if code in "sp":
            fields.append(count + code)
        elif code != "x":
            fields.extend([code] * int(count or 1))
    return tuple(fields)


def _held_size(value) -> int:
    """The bytes the objects of `value` take in memory (sys.getsizeof of each: its header, its payload
    and, for a list, tuple or dict, its slots), level by level through what its lists, tuples and
    dicts hold, each level one call into the interpreter's C code however many objects it has. An
    object held twice is counted twice, and so are the interpreter's shared ones (None, small ints):
    a value decoded from the wire holds objects of its own, so this is never under what it takes,
    and over by up to 3 times only for lists of small ints or None."""
    total, level = 0, [value]
    while level:
        total += sum(map(sys.getsizeof, level))
        level = gc.get_referents(*level)
    return total
