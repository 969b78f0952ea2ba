import sys

from alac.cli import main

sys.exit(main())
