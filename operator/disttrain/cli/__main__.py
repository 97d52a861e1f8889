"""`python -m disttrain.cli`: the `disttrain` command."""

import sys

from disttrain.cli.main import main

sys.exit(main())
