"""``python -m rag.cli``: the ``ragguard`` command."""

import sys

from rag.cli.commands import main

sys.exit(main())
