"""microTVM Project API server of kiln's ``qemu-cortex-m`` template."""

import sys
from pathlib import Path

from kiln.micro.project_api.board_handler import BoardProjectHandler
from kiln.micro.project_api.server import main

if __name__ == "__main__":
    sys.exit(main(BoardProjectHandler("qemu-cortex-m", Path(__file__).parent)))
