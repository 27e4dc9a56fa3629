import sys

from opsdctl.migrations import main

sys.exit(main())
