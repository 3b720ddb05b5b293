import sys

from rag_engine.cli import main

sys.exit(main())
