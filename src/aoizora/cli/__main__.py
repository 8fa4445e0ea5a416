"""`python -m aoizora.cli ...` runs the command line."""

from aoizora.cli import main

main()
