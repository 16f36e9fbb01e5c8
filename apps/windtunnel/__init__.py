"""The wind-tunnel application: an FHP lattice gas in eight matrices, sliced by rows."""

from apps.windtunnel.lattice import (
    SIZES,
    Slice,
    assemble,
    grid_sha256,
    reference_run,
    slice_rows,
)
from apps.windtunnel.picture import density_picture

__all__ = [
    "SIZES",
    "Slice",
    "assemble",
    "density_picture",
    "grid_sha256",
    "reference_run",
    "slice_rows",
]
