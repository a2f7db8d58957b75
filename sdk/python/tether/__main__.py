"""python3 -m tether run handler.py ..."""

import sys

from .cli import main

sys.exit(main())
