"""``python -m kiln``: the kiln command line."""

from kiln.driver.cli import _console_entry

_console_entry()
