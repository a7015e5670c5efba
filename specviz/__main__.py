import sys

from specviz.cli.commands import main

sys.exit(main())
