"""`python -m trl_doctor` runs the command line."""

from trl_doctor.front.cli import main

main()
