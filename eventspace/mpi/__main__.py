"""`python -m eventspace.mpi [options] prog.py ARGS...`: see eventspace.mpi.launch."""

import sys

from .launch import main

sys.exit(main())
