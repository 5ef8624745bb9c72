"""The messages analyzer on a real recording (fixtures/record/record.sh stage 8, `huge`): its
large messages (body sizes, frames per message, the one the broker refused) equal an independent
reading of tshark's AMQP fields; the capture's own scenario parameters say what they must be."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import amqpcap
from amqpcap.analyzers.messages import messages

FIX = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark (scripts/test.sh installs it)")


def tshark_contents(path: Path) -> tuple[list[dict], list[tuple[int, int, str]]]:
    """From tshark alone: every content header (stream, channel, packet, body_size, body frames
    after it on its channel and direction), and the broker's channel.close frames (stream,
    channel, reply text)."""
    fields = ["tcp.stream", "frame.number", "tcp.srcport", "amqp.type", "amqp.channel", "amqp.header.body-size",
              "amqp.method.class", "amqp.method.method", "amqp.method.arguments.reply_text"]
    out = subprocess.run(["tshark", "-r", str(path), "-Y", "amqp", "-T", "fields", "-E", "occurrence=a",
                          "-E", "aggregator=|", *[x for f in fields for x in ("-e", f)]],
                         capture_output=True, text=True, check=True).stdout
    headers: list[dict] = []
    current: dict = {}
    closes = []
    for line in out.splitlines():
        stream, number, sport, types, chans, sizes, cls, meth, texts = line.split("\t")
        sizes_it, methods = iter(sizes.split("|")), list(zip(cls.split("|"), meth.split("|"))) if cls else []
        texts_it, methods_it = iter(texts.split("|")), iter(methods)
        for ty, ch in zip(types.split("|"), chans.split("|")):
            key = (int(stream), int(ch), sport == "5672")
            if ty == "2":
                current[key] = {"stream": int(stream), "channel": int(ch), "packet": int(number),
                                "body_size": int(next(sizes_it)), "body_frames": 0}
                headers.append(current[key])
            elif ty == "3" and key in current:
                current[key]["body_frames"] += 1
            elif ty == "1":
                m = next(methods_it)
                if m == ("20", "40") and sport == "5672":
                    closes.append((int(stream), int(ch), next(texts_it)))
                elif m in (("20", "40"), ("10", "50")):
                    next(texts_it)
    return headers, closes


def test_large_messages_are_tsharks():
    """huge-messages.pcap.gz: pika with frame_max 4096 publishes three 900,000-byte bodies and
    one of 1,500,000 to a broker whose max_message_size is 1 MiB (1,048,576): 221 and 367 body
    frames (⌈size / 4088⌉), the last refused with channel.close 406."""
    path = FIX / "huge-messages.pcap.gz"
    headers, closes = tshark_contents(path)
    result = messages(amqpcap.load(path))
    large = result.tables["large"]
    want = [h for h in headers if h["body_size"] >= 1 << 20 or h["body_frames"] >= 100]
    assert [(r.packet, r.body_size, r.body_frames) for r in large.itertuples()] == \
        [(h["packet"], h["body_size"], h["body_frames"]) for h in want]
    # the scenario's own numbers
    assert [h["body_size"] for h in want] == [900_000] * 3 + [1_500_000]
    assert [h["body_frames"] for h in want] == [-(-900_000 // 4088)] * 3 + [-(-1_500_000 // 4088)]
    # the refusal: tshark's close text names the limit, and the refused message is the last one
    ((stream, channel, text),) = closes
    sizes = re.search(r"message size (\d+) is larger than configured max size (\d+)", text)
    assert sizes and int(sizes.group(1)) == 1_500_000 and int(sizes.group(2)) == 1_048_576
    assert large["refused"].tolist() == [False, False, False, True]
    assert (large["max_message_size"] == 1_048_576).all()
    assert large["channel"].eq(channel).all() and large["stream"].eq(stream).all()
    (f,) = [f for f in result.findings if f.id == "large-messages"]
    assert f.severity == "critical"
    assert f.evidence["body_bytes"] == 1_500_000 and f.evidence["refused"]
    assert f.evidence["near_max_messages"] == 3  # 900,000 is 86 % of 1 MiB
    assert f.subjects[0]["connection"] == "amqpcap-bulk-uploader"
    assert result.summary["messages"]["messages"] == len(headers)


@pytest.mark.parametrize("name", ["large-messages.pcap", "tls-plaintext.pcap", "healthy.pcap"])
def test_messages_far_below_the_limit_in_few_frames_are_not_large(name):
    """large-messages.pcap: PerfTest's 400 kB bodies in 131,064-byte frames (4 per message), to a
    RabbitMQ 3.10 (128 MiB limit): not large; nor the 140 kB of tls-plaintext."""
    result = messages(amqpcap.load(FIX / name))
    headers, _ = tshark_contents(FIX / name)
    assert result.summary["messages"]["body_bytes_max"] == max(h["body_size"] for h in headers)
    assert not result.findings and not len(result.tables["large"])


def tshark_frames(path: Path) -> list[tuple[int, bool, int, int, int]]:
    """Every AMQP frame in capture order, from tshark alone: (stream, from the broker, channel,
    type, packet); a packet's frames in the order tshark lists them."""
    out = subprocess.run(["tshark", "-r", str(path), "-Y", "amqp", "-T", "fields", "-E", "occurrence=a",
                          "-E", "aggregator=|", "-e", "tcp.stream", "-e", "frame.number", "-e", "tcp.srcport",
                          "-e", "amqp.type", "-e", "amqp.channel"], capture_output=True, text=True, check=True).stdout
    frames = []
    for line in out.splitlines():
        stream, number, sport, types, chans = line.split("\t")
        frames += [(int(stream), sport == "5672", int(ch), int(ty), int(number))
                   for ty, ch in zip(types.split("|"), chans.split("|"))]
    return frames


def test_the_frames_of_other_channels_during_a_large_transfer_are_tsharks():
    """huge-messages.pcap.gz: pika publishes on channel 2 while channel 1 of the same connection
    also sent frames. For each large message: the frames of the connection's other channels (not
    channel 0), same direction, between its content header and its last body frame, and whether
    those channels sent any frame in that direction at all, counted in tshark's frames."""
    path = FIX / "huge-messages.pcap.gz"
    frames = tshark_frames(path)
    large = messages(amqpcap.load(path)).tables["large"]
    assert len(large) == 4
    for m in large.itertuples():
        s2c = m.direction == "s2c"
        mine = [i for i, f in enumerate(frames) if f[:3] == (m.stream, s2c, m.channel)]
        header = next(i for i in mine if frames[i][3] == 2 and frames[i][4] == m.packet)
        last = [i for i in mine if i > header and frames[i][3] == 3][m.body_frames - 1]
        others = [i for i, f in enumerate(frames) if f[:2] == (m.stream, s2c) and f[2] not in (0, m.channel)]
        assert m.other_channel_frames_during == sum(header < i < last for i in others), m
        assert m.other_channels_active == bool(others), m
