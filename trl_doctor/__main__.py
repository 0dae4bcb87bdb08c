"""`python -m trl_doctor` runs the command line."""

from ._cli import main

main()
