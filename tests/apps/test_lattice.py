"""The wind-tunnel kernel: conservation, slicing determinism, flow, tables, picture."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from apps.windtunnel import (
    SIZES,
    Slice,
    assemble,
    density_picture,
    grid_sha256,
    reference_run,
    slice_rows,
)
from apps.windtunnel.lattice import (
    _COLLIDE,
    _COLLIDE_PAIRS,
    _FAN,
    _REVERSE,
    OBSTACLE,
    particle_count,
)

N = 32
STEPS = 40
SEED = 11

# Velocity of each moving bit in exact integer units: x in half cells, y in sqrt(3)/2.
VX = np.array([2, 1, -1, -2, -1, 1])
VY = np.array([0, 1, 1, 0, -1, -1])


def mass(state: int) -> int:
    return bin(state & 0x7F).count("1")


def momentum(state: int) -> tuple[int, int]:
    bits = [(state >> d) & 1 for d in range(6)]
    return int(np.dot(bits, VX)), int(np.dot(bits, VY))


def x_momentum(grid: np.ndarray) -> int:
    """Total x-momentum of a grid, in half cells per step."""
    return sum(int(VX[d]) * int(((grid >> d) & 1).sum()) for d in range(6))


def run_sliced(n: int, count: int, steps: int, seed: int) -> list[Slice]:
    """Step `count` slices in lockstep, exchanging border rows in plain Python."""
    slices = [Slice(n, i, count, seed) for i in range(count)]
    for step in range(steps):
        for s in slices:
            s.collide(step)
        rows = [s.border_rows() for s in slices]
        for i, s in enumerate(slices):
            above, below = rows[i - 1], rows[(i + 1) % count]
            s.stream(step, above[1], below[0])
    return slices


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return reference_run(N, STEPS, SEED)


def test_slice_rows_cover_the_rows_evenly():
    for n_rows, count in [(32, 1), (32, 3), (32, 7), (32, 32), (280, 140), (10, 4)]:
        bounds = slice_rows(n_rows, count)
        assert len(bounds) == count
        assert bounds[0][0] == 0 and bounds[-1][1] == n_rows
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        sizes = [stop - first for first, stop in bounds]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError):
        slice_rows(4, 5)
    with pytest.raises(ValueError):
        slice_rows(4, 0)


def test_sizes_give_140_threads_two_rows_each():
    assert SIZES["small"] < SIZES["medium"] < SIZES["large"]
    assert all(n % 2 == 0 and n >= 2 * 140 for n in SIZES.values())


def test_particle_count_is_conserved_every_step():
    whole = Slice(N, 0, 1, SEED)
    start = whole.particles()
    assert start > 0
    for step in range(200):
        whole.collide(step)
        assert whole.particles() == start
        top, bottom = whole.border_rows()
        whole.stream(step, bottom, top)
        assert whole.particles() == start


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 16, 32])
def test_any_slicing_gives_the_reference_grid(reference, count):
    slices = run_sliced(N, count, STEPS, SEED)
    grid = assemble(slices)
    assert grid.shape == (8, N, 2 * N) and grid.dtype == np.uint8
    assert np.array_equal(grid, reference)
    assert grid_sha256(grid) == grid_sha256(reference)
    assert sum(s.particles() for s in slices) == particle_count(reference)


def test_slices_in_threads_give_the_reference_grid(reference):
    count = 8
    slices = [Slice(N, i, count, SEED) for i in range(count)]
    from_above = [queue.SimpleQueue() for _ in range(count)]
    from_below = [queue.SimpleQueue() for _ in range(count)]

    def work(i: int) -> None:
        s = slices[i]
        for step in range(STEPS):
            s.collide(step)
            top, bottom = s.border_rows()
            from_below[(i - 1) % count].put(top)
            from_above[(i + 1) % count].put(bottom)
            s.stream(step, from_above[i].get(timeout=10), from_below[i].get(timeout=10))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert np.array_equal(assemble(slices), reference)


def test_the_seed_decides_the_run():
    assert np.array_equal(reference_run(N, 5, 3), reference_run(N, 5, 3))
    assert not np.array_equal(reference_run(N, 5, 3), reference_run(N, 5, 4))
    grid = reference_run(N, 5, 3)
    assert not np.array_equal(grid[0], grid[1])  # eight different matrices


def test_border_rows_are_matrix_major_rows():
    s = Slice(N, 1, 4, SEED)
    s.collide(0)
    top, bottom = s.border_rows()
    assert len(top) == len(bottom) == 8 * 2 * N
    assert top == np.ascontiguousarray(s.state[:, 0, :]).tobytes()
    assert bottom == np.ascontiguousarray(s.state[:, -1, :]).tobytes()
    assert np.frombuffer(top, np.uint8)[2 * N * 3:2 * N * 4].tobytes() == s.state[3, 0].tobytes()


def test_stream_checks_its_order_and_rows():
    s = Slice(N, 0, 2, SEED)
    top, bottom = s.border_rows()
    with pytest.raises(RuntimeError):
        s.stream(0, bottom, top)
    s.collide(0)
    with pytest.raises(ValueError):
        s.stream(0, bottom[:-1], top)
    s.stream(0, bottom, top)
    with pytest.raises(RuntimeError):
        s.stream(0, bottom, top)


def test_the_fan_drives_wind_round_an_empty_obstacle():
    n = 64
    whole = Slice(n, 0, 1, SEED)
    obstacle = (whole.state & OBSTACLE) != 0
    assert obstacle.any() and np.array_equal(obstacle[0], obstacle[7])
    particles = whole.particles()
    for step in range(300):
        whole.collide(step)
        top, bottom = whole.border_rows()
        whole.stream(step, bottom, top)
        if step % 50 == 49:
            assert not (whole.state[obstacle] & 0x7F).any()
            assert np.array_equal((whole.state & OBSTACLE) != 0, obstacle)
    # Mean velocity per particle, in cells per step: the fan has built up a wind.
    assert x_momentum(whole.state) / 2 / particles > 0.05


def test_collisions_conserve_mass_and_momentum():
    for index in range(256):
        out = int(_COLLIDE[index])
        state = index & 0x7F  # bit 7 of the index is the chirality
        assert out < 128
        assert mass(out) == mass(state)
        assert momentum(out) == momentum(state)
    # Each chirality permutes the states, and some states do collide.
    for chirality in (0, 1):
        half = _COLLIDE[chirality * 128:(chirality + 1) * 128]
        assert sorted(half) == list(range(128))
        assert (half != np.arange(128)).sum() > 20
    # The head-on pair east-west turns one way or the other.
    assert {int(_COLLIDE[0b001001]), int(_COLLIDE[0x80 | 0b001001])} == {0b010010, 0b100100}
    pairs = np.arange(1 << 16)
    high = _COLLIDE[pairs >> 8].astype(np.uint16) << 8
    assert np.array_equal(_COLLIDE_PAIRS, _COLLIDE[pairs & 0xFF] | high)


def test_fan_and_reversal_tables_conserve_particles():
    for state in range(128):
        forced = int(_FAN[state | 0x80])
        assert int(_FAN[state]) == state
        assert mass(forced) == mass(state)
        assert momentum(forced)[1] == momentum(state)[1]
        assert momentum(forced)[0] >= momentum(state)[0]
        turned = int(_REVERSE[state])
        assert mass(turned) == mass(state & 0x3F)
        assert momentum(turned) == tuple(-v for v in momentum(state))


def test_density_picture_has_the_requested_shape_and_shows_the_obstacle(reference):
    picture = density_picture(reference)
    assert len(picture) == 16 and all(len(line) == 64 for line in picture)
    marked = [(i, j) for i, line in enumerate(picture) for j, ch in enumerate(line) if ch == "#"]
    assert marked
    # The plate stands across the middle rows, a quarter of the way along.
    assert all(5 <= i <= 10 and 14 <= j <= 18 for i, j in marked)
    assert len(set("".join(picture)) - {"#"}) > 1  # density varies

    small = density_picture(reference, width=20, height=5)
    assert len(small) == 5 and all(len(line) == 20 for line in small)
    with pytest.raises(ValueError):
        density_picture(reference, width=2 * N + 1)
