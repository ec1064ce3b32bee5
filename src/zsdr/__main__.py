import sys

from zsdr.cli import main

sys.exit(main())
