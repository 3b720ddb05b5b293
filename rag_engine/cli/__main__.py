import sys

from rag_engine.cli.app import main

sys.exit(main())
