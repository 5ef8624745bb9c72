"""The vocabulary every layer speaks: errors, words and units, reply codes, display filters, how
values are written. Imports nothing else of amqpcap."""
