"""``python -m kiln``: the kiln command line."""

from kiln.driver.cli import console_entry

console_entry()
