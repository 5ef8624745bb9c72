"""Numbers in titles that read as what they are (issue 48): a count of thousands with its
thousands separator, like every other count in the titles ("5,275 messages", not "5275")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import amqpcap
from amqpcap.engine.registered import in_memory

FIX = Path(__file__).resolve().parents[2] / "fixtures"
consumers = in_memory("consumers")


def test_a_queue_growth_of_thousands_is_written_with_its_separator():
    """ten-consumers.pcap: the producer publishes thousands more messages than the ten
    consumers get (tshark's basic.publish and basic.deliver counts), so the queue grew by
    thousands; consumer-bound's title writes that count as 5,275, not 5275."""
    facts = json.loads((FIX / "ten-consumers.pcap.tshark.json").read_text())
    assert facts["methods"]["60.40"] - facts["methods"]["60.60"] >= 1000
    (f,) = [x for x in consumers(amqpcap.load(FIX / "ten-consumers.pcap")).findings if x.id == "consumer-bound"]
    m = re.search(r"queue grew by at least ([\d,]+) messages", f.title)
    assert m, f.title
    growth = int(m.group(1).replace(",", ""))  # (the largest of the consumers' lower bounds)
    assert growth >= f.evidence["backlog_growth_msgs"] >= 1000 and m.group(1) == f"{growth:,}", f.title
