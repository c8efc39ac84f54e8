"""microTVM Project API server of kiln's ``crt`` template and of projects made from it."""

import sys
from pathlib import Path

from kiln.micro.project_api.board_handler import BoardProjectHandler
from kiln.micro.project_api.server import main

if __name__ == "__main__":
    sys.exit(main(BoardProjectHandler("crt", Path(__file__).parent)))
