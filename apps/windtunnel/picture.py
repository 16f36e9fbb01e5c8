"""Pictures of the wind tunnel: matrix 0's particle density in a few rows of characters."""

from __future__ import annotations

import numpy as np

from .lattice import OBSTACLE, PARTICLES

_RAMP = " .:-=+*%@"
_OBSTACLE_CHAR = "#"


def density_picture(grid: np.ndarray, width: int = 64, height: int = 16) -> list[str]:
    """Matrix 0 as `height` strings of `width` characters, west to east, north row first.

    Each character is a block of cells: '#' if the block holds any obstacle cell, otherwise
    its particle density on the ramp " .:-=+*%@", stretched between the least and the most
    dense fluid block so that the wind's pile-up and wake show. Raises ValueError if the
    picture has more rows or columns than the matrix.
    """
    matrix = np.asarray(grid, np.uint8)[0]
    n, cols = matrix.shape
    if not (1 <= height <= n and 1 <= width <= cols):
        raise ValueError(f"a {width}x{height} picture does not fit a {cols}x{n} matrix")
    return picture_from_blocks(*column_blocks(matrix, width), height)


def column_blocks(matrix: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of one matrix, in `width` column blocks: particles, cells, obstacle cells (each
    shape (rows, width)). Slices compute their rows' blocks; stacked, they make the picture."""
    matrix = np.asarray(matrix, np.uint8)
    col_starts = np.linspace(0, matrix.shape[1], width + 1).astype(int)[:-1]
    particles = np.add.reduceat(PARTICLES[matrix], col_starts, axis=1)
    cells = np.add.reduceat(np.ones(matrix.shape, np.int64), col_starts, axis=1)
    obstacle = np.add.reduceat((matrix & OBSTACLE).astype(np.int64) // OBSTACLE, col_starts, axis=1)
    return particles, cells, obstacle


def picture_from_blocks(particles, cells, obstacle, height: int) -> list[str]:
    """The picture (see density_picture) from every row's column blocks, north row first."""
    particles, cells, obstacle = (np.asarray(a, np.int64) for a in (particles, cells, obstacle))
    n, width = particles.shape
    if not 1 <= height <= n:
        raise ValueError(f"a picture of {height} rows does not fit a matrix of {n} rows")
    row_starts = np.linspace(0, n, height + 1).astype(int)[:-1]
    block = lambda values: np.add.reduceat(values, row_starts, axis=0)  # noqa: E731
    solid = block(obstacle) > 0
    density = block(particles) / block(cells)
    fluid = density[~solid]
    low, high = (fluid.min(), fluid.max()) if fluid.size else (0.0, 1.0)
    span = high - low if high > low else 1.0
    levels = np.clip(((density - low) / span * (len(_RAMP) - 1)).round(), 0, len(_RAMP) - 1)
    return [
        "".join(_OBSTACLE_CHAR if solid[i, j] else _RAMP[int(levels[i, j])]
                for j in range(width))
        for i in range(height)
    ]
