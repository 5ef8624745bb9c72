"""`amqpcap verify`: amqpcap's decoding compared with Wireshark's dissector, through tshark."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..model.errors import UsageError
from .app import app
from .consoles import out
from .loading import ports_of
from .options import AddPortOpt, CaptureArg, KeylogOpt, PortOpt


@app.command()
def verify(capture: Path = CaptureArg, port: Optional[List[int]] = PortOpt,
           add_port: Optional[List[int]] = AddPortOpt, tls_keylog: Optional[Path] = KeylogOpt,
           json_out: Optional[Path] = typer.Option(None, "--json", help="also write the comparison as JSON here")) -> None:
    """Compare with Wireshark's AMQP dissector (tshark): per-stream method counts and frame types.

    An AMQP 1.0 stream is compared per direction: performatives, settled transfers, dispositions
    by role and outcome, flow link-credit, open, attach and SASL fields (never the initial
    response). Exit 0 when they agree or differ only where Wireshark is known wrong (each explained), 1 when
    an unexplained difference remains."""
    import json

    from ..io.verify import render, verify as run_verify

    _refuse_a_dataset(capture)
    v = run_verify(capture, ports=ports_of(port, add_port), tls_keylog=tls_keylog)
    render(out, v)
    if json_out is not None:
        doc = {"path": v.path, "exit_code": v.exit_code, "wireshark_packets": v.wireshark_packets,
               "wireshark_s": v.wireshark_s, "amqpcap_s": v.amqpcap_s, "notes": v.notes,
               "streams": [{"stream": s.stream, "filter": s.filter, "amqpcap": dict(s.amqpcap),
                            "wireshark": dict(s.wireshark)} for s in v.streams],
               "differences": [d.to_json() for d in v.differences]}
        try:
            json_out.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"cannot write {json_out}: {e.strerror or e}") from None
    if v.exit_code:
        raise typer.Exit(v.exit_code)


def _refuse_a_dataset(capture: Path) -> None:
    """tshark reads capture files: a dataset (`amqpcap ingest`) is refused in words, naming the
    capture it was made from, rather than with tshark's complaint about a directory."""
    from ..io.dataset import is_dataset, read_outline

    if is_dataset(capture):
        made_from = read_outline(capture).summary["path"]
        raise UsageError(f"amqpcap verify compares a capture file with tshark, and {capture} is a dataset "
                         f"(amqpcap ingest); verify the capture it was made from: {made_from}")
