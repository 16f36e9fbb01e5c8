"""CURVE security: key directories, the process's keys, and what may bind where."""

from __future__ import annotations

import ipaddress
import os
import stat
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path as FilePath
from urllib.parse import urlsplit

import zmq
from zmq.auth import load_certificate

from .errors import AuthError, PastSetError

# The environment variable naming a key directory: every client, scope and server of a process
# that is not given keys otherwise uses the keys in it.
KEYS_ENV = "EVENTSPACE_KEYS"

# A key directory, as `eventspace keys generate DIR` writes it. The files are ZeroMQ
# certificates (zmq.auth.load_certificate reads them): NAME.key holds a public key,
# NAME.key_secret the public and the secret key, readable by its owner only.
SERVER = "server"                  # node servers' key pair; clients need server.key only
CLIENT = "client"                  # the key pair clients (nodes, monitors, tools) present
AUTHORIZED = "authorized_clients"  # the client public keys (*.key) servers accept


@dataclass(frozen=True)
class Security:
    """The CURVE keys of a server and of its clients; `Security()` is plaintext.

    A server serves CURVE when it has `server_secret` and `authorized` (a directory of client
    public keys, `*.key`: any key in it is accepted, every other is refused). A client speaks
    CURVE when it has `server_public` and the client key pair. Keys are Z85 text (40 bytes).
    Load a key directory with `Security.load(DIR)`; `default()` is the process's own.
    """

    server_public: bytes | None = None
    server_secret: bytes | None = field(default=None, repr=False)
    client_public: bytes | None = None
    client_secret: bytes | None = field(default=None, repr=False)
    authorized: str | None = None
    keys: str | None = None   # the directory it was loaded from, named in messages

    @property
    def serves(self) -> bool:
        """True if a server with these keys serves CURVE."""
        return self.server_secret is not None and self.authorized is not None

    @property
    def connects(self) -> bool:
        """True if a client with these keys speaks CURVE."""
        return self.server_public is not None and self.client_secret is not None

    @classmethod
    def load(cls, keys: str | os.PathLike) -> Security:
        """The keys in a key directory; AuthError listing every problem (see `problems`).

        A directory without server.key_secret (a monitor's) gives client keys only.
        """
        found = problems(keys)
        if found:
            raise AuthError(f"cannot use the CURVE keys in {keys}: " + "; and ".join(found))
        base = FilePath(keys)
        server_public, server_secret = _certificate(base / SERVER)
        client_public, client_secret = load_certificate(base / f"{CLIENT}.key_secret")
        return cls(server_public, server_secret, client_public, client_secret,
                   os.fspath(base / AUTHORIZED) if server_secret is not None else None,
                   os.fspath(keys))

    def authorises(self, key: str | None) -> bool:
        """Whether client key `key` (Z85 text, as a request's Caller has it) is in the `authorized`
        directory now, read again: a key removed since the server started is no longer authorised,
        although CURVE, which checks a key once at its connection's handshake, still lets its
        connection in. For what a server does only for authorised clients (placing scope joins)."""
        if not self.serves or not key:
            return False
        try:
            paths = sorted(FilePath(self.authorized).glob("*.key"))
        except OSError:
            return False
        for path in paths:
            try:
                if load_certificate(path)[0] == key.encode():
                    return True
            except (OSError, ValueError):
                continue
        return False

    def configure_client(self, sock: zmq.Socket) -> None:
        """Make `sock` speak CURVE to the server (before it connects); nothing if plaintext."""
        if self.connects:
            sock.curve_serverkey = self.server_public
            sock.curve_publickey = self.client_public
            sock.curve_secretkey = self.client_secret

    def start_server(self, ctx: zmq.Context, sock: zmq.Socket):
        """Make `sock` a CURVE server (before it binds) with a ZAP authenticator on `ctx` that
        accepts the keys in `authorized`; returns the authenticator (stop it before destroying
        `ctx`), or None if plaintext. Keys added to the directory count from the next start."""
        if not self.serves:
            return None
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(ctx)
        auth.start()
        try:
            auth.configure_curve(domain="*", location=self.authorized)
        except (OSError, ValueError) as exc:
            auth.stop()
            raise AuthError(f"cannot read the authorised client keys in {self.authorized}: {exc}") from None
        sock.curve_server = True
        sock.curve_secretkey = self.server_secret
        return auth


def _certificate(base: FilePath) -> tuple[bytes, bytes | None]:
    secret = base.with_name(base.name + ".key_secret")
    if secret.exists():
        return load_certificate(secret)
    return load_certificate(base.with_name(base.name + ".key"))[0], None


def problems(keys: str | os.PathLike, serve: bool = False) -> list[str]:
    """What is wrong with a key directory, one "what; what to do" text per problem naming its file.

    It needs server.key and client.key_secret; with server.key_secret (a node server's directory;
    required if `serve`) also authorized_clients/ holding at least one *.key. Secret keys must be
    readable by their owner only.
    """
    base = FilePath(keys)
    fix = f"write a key directory with `eventspace keys generate {keys}`"
    if not base.exists():
        return [f"key directory {keys} does not exist; {fix}"]
    if not base.is_dir():
        return [f"{keys} is not a directory; name a key directory ({fix})"]
    found = []
    for name in (f"{SERVER}.key", f"{CLIENT}.key_secret"):
        found += _key_file_problems(base / name, fix, required=True)
    serves = serve or (base / f"{SERVER}.key_secret").exists()
    found += _key_file_problems(base / f"{SERVER}.key_secret", fix, required=serves)
    if serves:
        authorized = base / AUTHORIZED
        if not authorized.is_dir():
            found.append(f"{authorized} is missing: a server needs the client keys it accepts; "
                         f"create it and copy {base / f'{CLIENT}.key'} into it")
        else:
            keys_in = sorted(authorized.glob("*.key"))
            if not keys_in:
                found.append(f"{authorized} holds no *.key file, so no client could connect; copy "
                             f"{base / f'{CLIENT}.key'} (and other clients' public keys) into it")
            for path in keys_in:
                found += _key_file_problems(path, fix, required=True)
    return found


def _key_file_problems(path: FilePath, fix: str, required: bool) -> list[str]:
    if not path.exists():
        return [f"{path} is missing; {fix}"] if required else []
    try:
        public, secret = load_certificate(path)
    except (OSError, ValueError) as exc:
        return [f"{path} is not a key file ({exc}); {fix}"]
    out = []
    if path.suffix == ".key_secret":
        if secret is None:
            out.append(f"{path} holds no secret key; {fix}")
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            out.append(f"{path} can be read by other users (mode {stat.S_IMODE(mode):04o}); "
                       f"chmod 600 {path}")
    for key, what in ((public, "public"), (secret, "secret")):
        if key is not None and len(key) != 40:
            out.append(f"{path}: its {what} key is not 40 characters of Z85; {fix}")
    return out


def generate(keys: str | os.PathLike, force: bool = False) -> list[FilePath]:
    """Write a key directory: server and client key pairs (secret files mode 0600) and
    authorized_clients/ holding the client's public key. Returns the files written.

    Raises AuthError if the directory already holds keys, unless `force` (then every node and
    client must be given the new keys).
    """
    base = FilePath(keys)
    existing = [p for p in (base / f"{SERVER}.key_secret", base / f"{CLIENT}.key_secret") if p.exists()]
    if existing and not force:
        raise AuthError(f"{base} already holds keys ({existing[0].name}); pass --force to replace them "
                        "(every node server and client then needs the new ones)")
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    (base / AUTHORIZED).mkdir(mode=0o700, exist_ok=True)
    written = []
    for name in (SERVER, CLIENT):
        public, secret = zmq.curve_keypair()
        written.append(_write_key(base / f"{name}.key", public, None))
        written.append(_write_key(base / f"{name}.key_secret", public, secret))
        if name == CLIENT:
            written.append(_write_key(base / AUTHORIZED / f"{name}.key", public, None))
    return written


def _write_key(path: FilePath, public: bytes, secret: bytes | None) -> FilePath:
    what = "Secret" if secret else "Public"
    lines = [f"#   ZeroMQ CURVE {what} Certificate, written {datetime.now():%Y-%m-%d %H:%M} by eventspace"]
    if secret:
        lines.append("#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.")
    lines += ["", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret:
        lines.append(f'    secret-key = "{secret.decode()}"')
    mode = 0o600 if secret else 0o644
    # Created with its final mode (never readable by others, not even for an instant); an
    # existing file (--force) keeps its inode, so set the mode explicitly as well.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), mode)
        f.write("\n".join(lines) + "\n")
    return path


# -- the process's keys ---------------------------------------------------------------------------

_used: Security | None = None
_from_env: tuple[str, Security] | None = None   # (EVENTSPACE_KEYS, its keys), read once per value


def use(security: Security | None) -> None:
    """Make `security` the keys of this process's clients and servers that are given none
    (None: back to EVENTSPACE_KEYS). A node server process calls it with its pathmap's keys."""
    global _used
    _used = security


def default() -> Security:
    """This process's keys: those given to `use`, else the key directory in $EVENTSPACE_KEYS,
    else plaintext. AuthError if EVENTSPACE_KEYS names a directory that is not usable."""
    global _from_env
    if _used is not None:
        return _used
    keys = os.environ.get(KEYS_ENV)
    if not keys:
        return _PLAINTEXT
    if _from_env is None or _from_env[0] != keys:
        try:
            _from_env = (keys, Security.load(keys))
        except AuthError as exc:
            raise AuthError(f"{KEYS_ENV}={keys}: {exc}") from None
    return _from_env[1]


def resolve(security: Security | None) -> Security:
    """`security`, or the process's keys when it is None."""
    return default() if security is None else security


_PLAINTEXT = Security()


# -- binding ----------------------------------------------------------------------------------------

def bind_problem(bind: str, security: Security) -> str | None:
    """Why binding `bind` would expose the server, or None: a non-loopback TCP address is
    reachable from other hosts, and without CURVE anyone there may read and write everything."""
    parts = urlsplit(bind)
    if parts.scheme != "tcp" or security.serves:
        return None
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"refusing to bind {bind}: it is reachable from other hosts and anyone who can reach it "
            "may read and write every element; bind 127.0.0.1, turn on CURVE (`eventspace keys "
            f"generate DIR`, then {KEYS_ENV}=DIR or `security: {{keys: DIR}}` in the pathmap), "
            "or pass --insecure")


def check_bind(bind: str, security: Security, insecure: bool) -> None:
    """Refuse (PastSetError) a bind that `bind_problem` objects to, unless `insecure`: then warn
    on stderr and allow it."""
    problem = bind_problem(bind, security)
    if problem is None:
        return
    if not insecure:
        raise PastSetError(problem)
    print(f"warning: serving {bind} without authentication or encryption (--insecure)", file=sys.stderr)
