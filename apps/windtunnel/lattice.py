"""An FHP lattice gas wind tunnel: eight bit-packed hexagonal matrices, sliced by rows."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

# One uint8 per cell. Bits 0-5 are the six moving particles, counter-clockwise from east
# (bit d moves along 60*d degrees), bit 6 is the rest particle and bit 7 marks an obstacle cell.
# Row 0 is the top (north) row; rows with an odd GLOBAL index sit half a cell to the east, so a
# cell's diagonal neighbours depend on its global row's parity.
E, NE, NW, W, SW, SE = (1 << d for d in range(6))
REST = 1 << 6
OBSTACLE = 1 << 7
MOVING = 0x3F

MATRICES = 8

# N (rows) per problem size; columns are 2N. "small" is the smallest N that gives each of 140
# threads two rows; "medium" and "large" (14 and 28 rows a thread) cost about 10 and 35-40 times
# as much per step on a 2-core machine (`python -m apps.windtunnel.calibrate` measures them).
SIZES: dict[str, int] = {"small": 280, "medium": 1960, "large": 3920}

_DENSITY = 0.25  # initial probability of each of the 7 particle bits
# The fan: in these global columns a quarter of the cells (two coin flips) turn their
# west-going particles east each step. A fixed width keeps the wind speed it settles at (about
# 0.3 cells per step per particle at N = 64..256) nearly independent of N, though it takes
# longer to get there as N grows; a band growing with N drives the wind supersonic.
_FAN_COLUMNS = (0, 1)
_MASK64 = (1 << 64) - 1

# What each random field is for, so that fields drawn from one seed are independent.
_FILL, _CHIRALITY, _CHIRALITY_SHIFT, _FAN_SHIFT = range(4)


def _mix(x):
    """splitmix64's finaliser; works on Python ints and on uint64 arrays alike."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _key(seed: int, purpose: int) -> int:
    return _mix((seed * 0x9E3779B97F4A7C15 + purpose) & _MASK64)


def _cell_hash(seed: int, purpose: int, rows: np.ndarray, cols: int) -> np.ndarray:
    """64 random bits per (global row, matrix, global column): shape (len(rows), 8, cols)."""
    r = np.asarray(rows, dtype=np.uint64)[:, None, None]
    m = np.arange(MATRICES, dtype=np.uint64)[None, :, None]
    c = np.arange(cols, dtype=np.uint64)[None, None, :]
    x = np.uint64(_key(seed, purpose)) + m * np.uint64(0xD1B54A32D192ED03)
    x = x + r * np.uint64(0xABC98388FB8FAC03) + c * np.uint64(0x8CB92BA72F3D8DD7)
    return _mix(x)


def _rotate(movers: int, k: int) -> int:
    """The moving bits turned by k * 60 degrees counter-clockwise."""
    k %= 6
    return ((movers << k) | (movers >> (6 - k))) & MOVING


def _collision_table() -> np.ndarray:
    """FHP collisions with a rest particle; index bit 7 is the chirality (0: left, 1: right).

    Head-on pairs (and their dual, four movers with head-on holes) turn by 60 degrees, the two
    symmetric triads swap, and a rest particle with one mover becomes two movers at +-60
    degrees and back. Every other state is unchanged. Outputs never have bit 7 set.
    """
    table = np.zeros(256, dtype=np.uint8)
    head_on = {0b001001, 0b010010, 0b100100}
    triads = {0b010101, 0b101010}
    singles = {1 << d: d for d in range(6)}
    pair_of = [_rotate(0b100010, d) for d in range(6)]  # bits d-1 and d+1, momentum e_d
    pairs_120 = {pair: d for d, pair in enumerate(pair_of)}
    for chirality in (0, 1):
        turn = 1 if chirality == 0 else -1
        for state in range(128):
            movers, rest = state & MOVING, state & REST
            if movers in head_on or (MOVING ^ movers) in head_on:
                out = _rotate(movers, turn) | rest
            elif movers in triads:
                out = (MOVING ^ movers) | rest
            elif rest and movers in singles:
                out = pair_of[singles[movers]]
            elif not rest and movers in pairs_120:
                out = (1 << pairs_120[movers]) | REST
            else:
                out = state
            table[state | (chirality << 7)] = out
    return table


def _fan_table() -> np.ndarray:
    """Index bit 7 set: each west-going particle whose east-going mirror is free turns east."""
    table = np.arange(256, dtype=np.uint8) & 0x7F
    for state in range(128):
        out = state
        for west, east in ((W, E), (NW, NE), (SW, SE)):
            if out & west and not out & east:
                out ^= west | east
        table[state | 0x80] = out
    return table


def _reverse_table() -> np.ndarray:
    """Each moving particle turned round (d -> d+3); rest and obstacle bits dropped."""
    return np.array([_rotate(s & MOVING, 3) for s in range(256)], dtype=np.uint8)


def _pairs(table: np.ndarray) -> np.ndarray:
    """A table over two adjacent cells at once (a uint16 index), whatever the byte order."""
    index = np.arange(1 << 16)
    return (table[index & 0xFF].astype(np.uint16) | (table[index >> 8].astype(np.uint16) << 8))


_COLLIDE = _collision_table()
_COLLIDE_PAIRS = _pairs(_COLLIDE)
_FAN = _fan_table()
_REVERSE = _reverse_table()
# The particles a cell holds, by its state (the obstacle bit is not a particle).
PARTICLES = np.array([bin(s & (MOVING | REST)).count("1") for s in range(256)], dtype=np.int64)


def _obstacle(n: int, rows: np.ndarray) -> np.ndarray:
    """A flat plate across the flow, in global coordinates: bool (len(rows), 2n)."""
    cols = 2 * n
    x0, thickness = cols // 4, max(1, n // 64)
    y0 = (3 * n) // 8
    y1 = max(y0 + 1, (5 * n) // 8)
    r = np.asarray(rows)[:, None] % n
    c = np.arange(cols)[None, :]
    return (r >= y0) & (r < y1) & (c >= x0) & (c < x0 + thickness)


def slice_rows(n_rows: int, count: int) -> list[tuple[int, int]]:
    """(first_row, stop_row) of each of `count` contiguous bands, sizes differing by at most 1."""
    if not 1 <= count <= n_rows:
        raise ValueError(f"cannot split {n_rows} rows into {count} non-empty slices")
    base, extra = divmod(n_rows, count)
    bounds, first = [], 0
    for i in range(count):
        stop = first + base + (1 if i < extra else 0)
        bounds.append((first, stop))
        first = stop
    return bounds


class Slice:
    """One thread's band of rows in all eight matrices, advanced by collide -> exchange -> stream.

    Every random choice is a function of (seed, matrix, global row, global column, step) only,
    so any slicing of the same `n` and `seed`, stepped with the same step numbers, yields
    exactly the grid of `reference_run`. A slice is not thread-safe; give each thread its own.
    """

    def __init__(self, n: int, index: int, count: int, seed: int):
        if n < 4 or n % 2:
            raise ValueError(f"n must be even and at least 4 (periodic hexagonal rows), got {n}")
        bounds = slice_rows(n, count)
        if not 0 <= index < count:
            raise ValueError(f"slice index {index} is not in 0..{count - 1}")
        self.n, self.index, self.count, self.seed = n, index, count, seed
        self.rows: tuple[int, int] = bounds[index]  # global (first, stop)
        first, stop = self.rows
        nrows, cols = stop - first, 2 * n
        self._cols = cols
        global_rows = np.arange(first, stop)

        # Two buffers of (row, matrix, column), so that the band's rows of all eight matrices are
        # one contiguous block, with a ghost row above and below and a ghost column at each side
        # so that the shifted neighbours streaming reads are plain views, all made once here.
        shape = (nrows + 2, MATRICES, cols + 2)
        buffers = (np.zeros(shape, np.uint8), np.zeros(shape, np.uint8))
        self._scratch = np.empty((nrows, MATRICES, cols + 2), np.uint8)
        self._views = (_Views(buffers[0], buffers[1], self._scratch, first),
                       _Views(buffers[1], buffers[0], self._scratch, first))
        self._current = self._views[0]
        self._collided_step: int | None = None

        # 0 or 0x80 (bit 7 of a table index) per cell, repeated along the row so that each
        # step's field is this one shifted by a per-step amount: a view, not a fresh draw.
        self._noise = np.empty((nrows, MATRICES, 2 * cols + 2), np.uint8)
        obstacle = _obstacle(n, global_rows)
        repeat = np.arange(2 * cols + 2) % cols
        chunk = max(1, (1 << 20) // (MATRICES * cols))  # rows hashed at once: 8 MB of uint64
        for lo in range(0, nrows, chunk):
            rows = global_rows[lo:lo + chunk]
            bits = (_cell_hash(seed, _CHIRALITY, rows, cols) >> np.uint64(63)).astype(np.uint8)
            self._noise[lo:lo + chunk] = (bits << 7)[:, :, repeat]
            fill = _initial_fill(seed, rows, cols, obstacle[lo:lo + chunk])
            self._current.cells[lo:lo + chunk] = fill
        self._chirality_key = _key(seed, _CHIRALITY_SHIFT)
        self._fan_key = _key(seed, _FAN_SHIFT)
        fan_shape = (nrows, MATRICES, _FAN_COLUMNS[1] - _FAN_COLUMNS[0])
        self._fan_flags = np.empty(fan_shape, np.uint8)
        self._fan_forced = np.empty(fan_shape, np.uint8)

        self._wall = _Wall(n, global_rows, obstacle)
        for views in self._views:
            views.bounce = self._wall.box_of(views)

    @property
    def state(self) -> np.ndarray:
        """The band, shape (8, rows, 2n), uint8: a view, and a different one after `stream`."""
        return self._current.state

    def collide(self, step: int) -> None:
        """Run the fan, then collide every cell: local, in place.

        Until the following `stream` the obstacle bits read 0 (obstacle cells hold no
        particles, and the collision table reads bit 7 as the chirality).
        """
        views, noise, cols = self._current, self._noise, self._cols
        first, stop = _FAN_COLUMNS
        bits = _mix((self._fan_key + step) & _MASK64)
        a, b = bits % cols, (bits >> 32) % cols
        flags, forced, fan = self._fan_flags, self._fan_forced, views.fan
        np.bitwise_and(noise[:, :, a + first:a + stop], noise[:, :, b + first:b + stop], flags)
        np.bitwise_or(flags, fan, flags)
        np.take(_FAN, flags, out=forced, mode="wrap")
        np.copyto(fan, forced)
        # Over the band's contiguous rows, ghost columns included (stream overwrites them), and
        # two cells per table lookup.
        shift = _mix((self._chirality_key + step) & _MASK64) % cols
        np.bitwise_xor(views.rows, noise[:, :, shift:shift + cols + 2], self._scratch)
        np.take(_COLLIDE_PAIRS, self._scratch.view(np.uint16), out=views.pairs, mode="wrap")
        self._collided_step = step

    def border_rows(self) -> tuple[bytes, bytes]:
        """(top row, bottom row) of the band after `collide`, for the slice above / below.

        Each is 8 * 2n bytes, matrix-major: bytes [m * 2n, (m + 1) * 2n) are that row of
        matrix m, west to east, one cell per byte. The top row is the `from_below` of the slice
        above; the bottom row is the `from_above` of the slice below.
        """
        return self._current.top.tobytes(), self._current.bottom.tobytes()

    def stream(self, step: int, from_above: bytes, from_below: bytes) -> None:
        """Move every particle one cell, reflecting off the obstacle; must follow `collide(step)`.

        `from_above` is the bottom border row of the slice above (of the last slice, for slice
        0) and `from_below` the top border row of the slice below (of slice 0, for the last),
        both as `border_rows` returns them; with one slice both are its own rows. Raises
        RuntimeError unless `collide(step)` was the previous call on this slice, ValueError if
        a row is not 8 * 2n bytes.
        """
        if self._collided_step != step:
            raise RuntimeError(f"stream({step}) without collide({step}) just before it")
        views = self._current
        above = np.frombuffer(from_above, np.uint8)
        below = np.frombuffer(from_below, np.uint8)
        if above.size != views.above.size or below.size != views.below.size:
            raise ValueError(f"border rows must be {views.above.size} bytes")
        self._collided_step = None
        np.copyto(views.above, above.reshape(views.above.shape))
        np.copyto(views.below, below.reshape(views.below.shape))
        for ghost, source in views.wrap:
            np.copyto(ghost, source)
        for ufunc, x, y, out in views.moves:
            ufunc(x, y, out)
        if views.bounce is not None:
            self._wall.reflect(*views.bounce)
        self._current = self._views[1] if views is self._views[0] else self._views[0]

    def particles(self) -> int:
        """Particles (moving and resting) in the band, all eight matrices."""
        return particle_count(self._current.cells)


def _bits(value: int) -> np.ndarray:
    # A uint8 array, not a Python int, as a ufunc operand: no scalar conversion per call.
    return np.full((1, 1), value, np.uint8)


class _Views:
    """Every view one step reads or writes when `buffer` holds the state and `target` receives
    the streamed one; made once, so a step only calls ufuncs."""

    def __init__(self, buffer: np.ndarray, target: np.ndarray, scratch: np.ndarray, first_row: int):
        nrows, cols = buffer.shape[0] - 2, buffer.shape[2] - 2
        self.rows = buffer[1:-1]
        self.pairs = self.rows.view(np.uint16)
        self.cells = buffer[1:-1, :, 1:-1]  # (row, matrix, column)
        self.state = self.cells.transpose(1, 0, 2)
        self.top, self.bottom = buffer[1, :, 1:-1], buffer[-2, :, 1:-1]
        self.above, self.below = buffer[0, :, 1:-1], buffer[-1, :, 1:-1]
        self.wrap = ((buffer[:, :, 0], buffer[:, :, cols]), (buffer[:, :, -1], buffer[:, :, 1]))
        self.fan = self.cells[:, :, _FAN_COLUMNS[0]:_FAN_COLUMNS[1]]
        self.out = target[1:-1, :, 1:-1]
        self.bounce: tuple[np.ndarray, np.ndarray] | None = None  # set by _Wall.box_of

        # Pull: a particle moving along d arrives from the cell one step against d. Each grid
        # row of all eight matrices, ghost columns included, is one contiguous run of
        # 8 * (2n + 2) bytes, so a neighbour one column east or west is the same run shifted by
        # one byte: every move is a 2-D ufunc over runs. Ghost columns receive garbage, and are
        # rewritten before they are read. Diagonal sources sit one column further west on
        # rows with an even global index.
        run = MATRICES * (cols + 2)
        source, dest = buffer.reshape(nrows + 2, run), target.reshape(nrows + 2, run)
        tmp = scratch.reshape(nrows, run)[:, 1:-1]
        out = dest[1:-1, 1:-1]

        def shifted(rows: slice, row_step: int, column_step: int) -> np.ndarray:
            band = source[1 + row_step:nrows + 1 + row_step]
            return band[rows, 1 + column_step:run - 1 + column_step]

        and_, or_ = np.bitwise_and, np.bitwise_or
        every = slice(None)
        moves = [(and_, shifted(every, 0, -1), _bits(E), out),
                 (and_, shifted(every, 0, 1), _bits(W), tmp), (or_, out, tmp, out),
                 (and_, shifted(every, 0, 0), _bits(REST), tmp), (or_, out, tmp, out)]
        even, odd = slice(first_row % 2, nrows, 2), slice(1 - first_row % 2, nrows, 2)
        for rows, west in ((even, -1), (odd, 0)):
            if not range(nrows)[rows]:
                continue
            o, t = out[rows], tmp[rows]
            for bit, row_step, column_step in ((SE, -1, west), (SW, -1, west + 1),
                                               (NE, 1, west), (NW, 1, west + 1)):
                moves += [(and_, shifted(rows, row_step, column_step), _bits(bit), t),
                          (or_, o, t, o)]
        self.moves = tuple(moves)


class _Wall:
    """Bounce-back off the obstacle, within the box of this band's cells that touch it: after
    streaming, a particle whose source cell is an obstacle is the cell's own particle turned
    round, and obstacle cells hold only their mark."""

    def __init__(self, n: int, global_rows: np.ndarray, obstacle: np.ndarray):
        above, below = _obstacle(n, global_rows - 1), _obstacle(n, global_rows + 1)
        even = (global_rows % 2 == 0)[:, None]
        odd = ~even

        def west(grid: np.ndarray) -> np.ndarray:  # each cell's western neighbour's value
            return np.roll(grid, 1, axis=1)

        def east(grid: np.ndarray) -> np.ndarray:
            return np.roll(grid, -1, axis=1)

        # Per fluid cell, the directions whose source cell (as in _Views' moves) is an obstacle.
        blocked = {E: west(obstacle), W: east(obstacle),
                   SE: np.where(even, west(above), above), SW: np.where(odd, east(above), above),
                   NE: np.where(even, west(below), below), NW: np.where(odd, east(below), below)}
        walls = np.zeros(obstacle.shape, np.uint8)
        for bit, source_is_obstacle in blocked.items():
            walls[source_is_obstacle] |= bit
        walls[obstacle] = 0
        touched = (walls != 0) | obstacle
        self._box = None
        if not touched.any():
            return
        r = np.flatnonzero(touched.any(axis=1))
        c = np.flatnonzero(touched.any(axis=0))
        rows, columns = slice(r[0], r[-1] + 1), slice(c[0], c[-1] + 1)
        self._box = rows, columns
        walls, obstacle = walls[rows, columns], obstacle[rows, columns]
        # Indexed (row, matrix, column) like the buffers, the same for all eight matrices.
        self._walls = walls[:, None, :]
        self._keep = np.where(obstacle, 0, ~walls).astype(np.uint8)[:, None, :]
        self._marks = np.where(obstacle, OBSTACLE, 0).astype(np.uint8)[:, None, :]
        self._turned = np.empty((walls.shape[0], MATRICES, walls.shape[1]), np.uint8)

    def box_of(self, views: _Views) -> tuple[np.ndarray, np.ndarray] | None:
        """The box in `views`' collided cells and in its streamed output, or None."""
        if self._box is None:
            return None
        rows, columns = self._box
        return views.cells[rows, :, columns], views.out[rows, :, columns]

    def reflect(self, collided: np.ndarray, streamed: np.ndarray) -> None:
        turned = self._turned
        np.take(_REVERSE, collided, out=turned, mode="wrap")
        np.bitwise_and(turned, self._walls, turned)
        np.bitwise_and(streamed, self._keep, streamed)
        np.bitwise_or(streamed, turned, streamed)
        np.bitwise_or(streamed, self._marks, streamed)


def _initial_fill(seed: int, global_rows: np.ndarray, cols: int,
                  obstacle: np.ndarray) -> np.ndarray:
    """(rows, matrix, column) cells, each particle bit set with probability _DENSITY;
    obstacle cells hold only their mark."""
    h = _cell_hash(seed, _FILL, global_rows, cols)
    threshold = np.uint64(int(_DENSITY * 256))
    cells = np.zeros(h.shape, np.uint8)
    for bit in range(7):
        byte = (h >> np.uint64(8 * bit)) & np.uint64(0xFF)
        cells |= (byte < threshold).astype(np.uint8) << bit
    return np.where(obstacle[:, None, :], np.uint8(OBSTACLE), cells)


def particle_count(grid: np.ndarray) -> int:
    """Particles (moving and resting) in a uint8 state array of any shape."""
    cells = np.asarray(grid, np.uint8).reshape(-1)
    chunk = 1 << 22  # bincount widens to intp: bound that copy
    counts = sum(np.bincount(cells[i:i + chunk], minlength=256)
                 for i in range(0, cells.size, chunk))
    return int(np.dot(counts, PARTICLES)) if cells.size else 0


def reference_run(n: int, steps: int, seed: int) -> np.ndarray:
    """The ground truth: one slice stepped `steps` times from step 0; shape (8, n, 2n)."""
    whole = Slice(n, 0, 1, seed)
    for step in range(steps):
        whole.collide(step)
        top, bottom = whole.border_rows()
        whole.stream(step, bottom, top)
    return assemble([whole])


def assemble(slices: Iterable[Slice]) -> np.ndarray:
    """The slices' states stacked by row into one C-ordered (8, n, 2n) uint8 array."""
    ordered = sorted(slices, key=lambda s: s.rows[0])
    return np.ascontiguousarray(np.concatenate([s.state for s in ordered], axis=1))


def row_digests(state: np.ndarray) -> bytes:
    """32 bytes per row of a band (shape (8, rows, 2n)): the SHA-256 of that row of all eight
    matrices, matrix-major. Concatenated in row order over the slices, they are the same for
    any slicing of the grid."""
    grid = np.asarray(state, np.uint8)
    return b"".join(hashlib.sha256(np.ascontiguousarray(grid[:, r, :]).tobytes()).digest()
                    for r in range(grid.shape[1]))


def grid_sha256(grid: np.ndarray) -> str:
    """Hex SHA-256 of the grid: of its row digests (`row_digests`) in row order, so that a run
    sliced over any number of threads can compute it without gathering the grid."""
    return digests_sha256(row_digests(grid))


def digests_sha256(digests: bytes) -> str:
    """The grid's SHA-256 from its row digests, all slices' concatenated in row order."""
    return hashlib.sha256(digests).hexdigest()
