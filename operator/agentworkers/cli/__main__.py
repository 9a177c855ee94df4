import sys

from agentworkers.cli.main import main

sys.exit(main())
