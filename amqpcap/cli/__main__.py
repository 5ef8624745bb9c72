"""`python -m amqpcap.cli`: the command line, as `amqpcap`."""

from .app import main

main()
