"""The arguments and options the subcommands share, each defined once."""

from __future__ import annotations

import typer

from ..io.inputs import IN_MEMORY_MAX_BYTES


CaptureArg = typer.Argument(..., metavar="CAPTURE", help="pcap or pcapng file, optionally gzip-compressed", show_default=False)
CapturesArg = typer.Argument(
    ..., metavar="CAPTURE...", show_default=False,
    help="pcap or pcapng files, optionally gzip-compressed; several files, a glob or a directory (a tcpdump ring) "
         "are read as one capture, merged by time as mergecap merges them; or a dataset written by `amqpcap ingest` "
         "(its directory, or an fsspec URL such as s3://bucket/ring.dataset)")
StrictOpt = typer.Option(False, "--strict", help="stop at a file of the set that cannot be read (default: skip it with a warning)")
PortOpt = typer.Option(
    None, "--port", "-p", metavar="PORT",
    help="AMQP port, replacing the defaults 5672 and 5671 (AMQPS) (repeat for several; --add-port keeps them)")
AddPortOpt = typer.Option(
    None, "--add-port", metavar="PORT",
    help="AMQP port in addition to the defaults 5672 and 5671 (or to --port) (repeat for several)")
KeylogOpt = typer.Option(None, "--tls-keylog", metavar="FILE",
                         help="TLS key log (NSS format, e.g. Python's SSLContext.keylog_filename) to decrypt AMQPS with tshark")
LimitOpt = typer.Option(
    None, "--limit", metavar="NAME=VALUE",
    help="set a resource cap, e.g. max_streams=5000 or max_frames=50M (K/M/G: ×1024ⁿ; repeat for "
         "several; names and defaults: docs/tables.md, Resource caps)")


#: `info` lists at most this many connections unless --all: a capture of many short connections
#: would otherwise print thousands of rows (and rich takes ~1.5 s to lay out 1,100 of them).
INFO_CONNECTIONS = 20
AllConnectionsOpt = typer.Option(
    False, "--all", help=f"list every AMQP connection and consumer (default: the {INFO_CONNECTIONS} connections with "
                         f"the most packets and the first {INFO_CONNECTIONS} consumers)")


SchedulerOpt = typer.Option(
    None, "--scheduler", metavar="ADDRESS",
    help="analyse on Dask: the scheduler's address (tcp://HOST:PORT; for a dataset, which the workers must see at "
         "the same path or read from the same URL), or `local` for a cluster of this machine's cores (a capture "
         "file goes through a temporary dataset)")
IngestSchedulerOpt = typer.Option(
    None, "--scheduler", metavar="ADDRESS",
    help="decode the buckets on Dask: the scheduler's address (tcp://HOST:PORT; the workers must see the "
         "dataset directory at the same path), or `local` for a cluster of this machine's cores")
WorkersOpt = typer.Option(None, "--workers", min=1, max=256,
                          help="with --scheduler local: worker processes (default: one per core)")
SlicePacketsOpt = typer.Option(
    None, "--slice-packets", min=1, metavar="N",
    help="on Dask: a bucket of more than N packets is analysed in slices of its time of about N packets, one after "
         "the other (default: as many as half a worker's memory limit holds, about 1.6 KB a packet)")


OutOpt = typer.Option(None, "--out", "-o", help="directory for tables, plots (and summary.json, report.html)")
RowsOpt = typer.Option(
    0, "--rows", min=0, metavar="N",
    help="also print the first N rows of each of the analyzer's tables (default: its summary numbers and findings only)")
FormatOpt = typer.Option("csv", "--format", help="table format: csv or parquet")
PlotsOpt = typer.Option(True, "--plots/--no-plots", help="draw PNG plots into --out")
BodiesOpt = typer.Option(
    False, "--bodies", help="keep message bodies and write them to --out as the bodies table (off by default: "
                            "bodies may hold personal data; at most max_body_bytes are kept)")


InMemoryOpt = typer.Option(False, "--in-memory",
                           help="decode the capture in this process whatever its size (by default one larger than "
                                f"{IN_MEMORY_MAX_BYTES >> 20} MB goes through a temporary dataset on a local Dask cluster)")
