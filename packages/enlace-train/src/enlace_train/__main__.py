"""`python -m enlace_train CONFIG [key=value ...]` (also what torchrun launches)."""

import sys

from enlace_train.cli import main

sys.exit(main())
