"""The messages analyzer on a real recording (fixtures/record/record.sh stage 8, `huge`): its
large messages (body sizes, frames per message, the one the broker refused) equal an independent
reading of tshark's AMQP fields; the capture's own scenario parameters say what they must be."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import amqpcap
import amqpcap.analyzers.messages as messages_module
from amqpcap.engine.registered import in_memory, splits
from amqpcap.io.load import Capture
from amqpcap.model.facts import ns
from amqpcap.engine.partitions import sliced_partial
from amqpcap.io.pieces import facts_of
from amqpcap.model.facts import clean_cuts
from tiers import one_fast

messages = in_memory("messages")
SPLIT = splits()["messages"]  # (a partition's part: a list of its one partial)

from test_partition import assert_same_partial  # noqa: E402

FIX = Path(__file__).resolve().parents[2] / "fixtures"

pytestmark = pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark (scripts/test.sh installs it)")


def tshark_contents(path: Path) -> tuple[list[dict], list[tuple[int, int, str]]]:
    """From tshark alone: every content header (stream, channel, packet, body_size, body frames
    after it on its channel and direction, s2c: sent by the broker), and the broker's
    channel.close frames (stream, channel, reply text)."""
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
                                "body_size": int(next(sizes_it)), "body_frames": 0, "s2c": sport == "5672"}
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
    assert f.evidence["near_max_messages_c2s"] == 3  # 900,000 is 86 % of 1 MiB (published)
    assert f.subjects[0]["connection"] == "amqpcap-bulk-uploader"
    assert result.summary["messages"]["messages_c2s"] == sum(not h["s2c"] for h in headers)
    assert result.summary["messages"]["messages_s2c"] == sum(h["s2c"] for h in headers)


def test_large_messages_are_counted_each_way_in_the_huge_messages_title():
    """huge-messages.pcap.gz: the four large bodies are published (c2s) and none delivered; the
    title says so ("large messages: 4 published"), and the near ones are published too."""
    path = FIX / "huge-messages.pcap.gz"
    headers, _ = tshark_contents(path)
    want = [h for h in headers if h["body_size"] >= 1 << 20 or h["body_frames"] >= 100]
    published, delivered = sum(not h["s2c"] for h in want), sum(h["s2c"] for h in want)
    assert (published, delivered) == (4, 0)  # the scenario: pika publishes, nothing consumes
    (f,) = messages(amqpcap.load(path)).findings
    assert f"; large messages: {published} published (3 published near the limit)" in f.title, f.title
    assert "delivered" not in f.title and "4 large messages" not in f.title
    assert (f.evidence["large_messages_c2s"], f.evidence["large_messages_s2c"]) == (published, delivered)
    assert (f.evidence["near_max_messages_c2s"], f.evidence["near_max_messages_s2c"]) == (3, 0)


def test_a_message_published_and_delivered_is_counted_once_each_way(monkeypatch):
    """large-messages.pcap: PerfTest publishes its 400 kB messages and consumes them, so each
    crosses the wire twice, a content header each way. With the large threshold below 400 kB
    every one is large: the finding, the tables and the summary count them published and
    delivered apart, as tshark's content headers per direction (amqp.header.body-size on the
    broker's port or not) count them, never one total of both."""
    threshold = 300_000
    monkeypatch.setattr(messages_module, "LARGE_BODY_BYTES", threshold)
    path = FIX / "large-messages.pcap"
    headers, _ = tshark_contents(path)
    big = [h for h in headers if h["body_size"] >= threshold]
    published, delivered = sum(not h["s2c"] for h in big), sum(h["s2c"] for h in big)
    assert published > 0 and delivered > 0  # the scenario: one producer, one consumer, one queue
    result = messages(amqpcap.load(path))
    (f,) = result.findings
    assert f"large messages: {published} published and {delivered} delivered" in f.title, f.title
    assert f"{published + delivered} large messages" not in f.title
    assert (f.evidence["large_messages_c2s"], f.evidence["large_messages_s2c"]) == (published, delivered)
    s = result.summary["messages"]
    assert (s["large_messages_c2s"], s["large_messages_s2c"]) == (published, delivered)
    assert (s["messages_c2s"], s["messages_s2c"]) == (sum(not h["s2c"] for h in headers),
                                                      sum(h["s2c"] for h in headers))
    assert "messages" not in s and "large_messages" not in s
    conns = result.tables["connections"]
    assert (int(conns["large_messages_c2s"].sum()), int(conns["large_messages_s2c"].sum())) == (published, delivered)
    # the subjects, each with its own direction: the consumer receives, the producer sends
    by_name = {x["connection"]: x for x in f.subjects}
    assert by_name["perf-test-consumer-0"]["large_messages_s2c"] == delivered
    assert by_name["perf-test-producer-0"]["large_messages_c2s"] == published


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


# -- over slices of a partition's time (docs/time-split.md) -----------------------------------

def sliced_and_whole(cap: Capture, few: int) -> None:
    """The messages step over `cap` cut into 7 slices of time and into slices of `few` packets (a
    message's body frames in several slices, the broker's refusal in a later one than its
    message), gives the partial of `cap` whole."""
    facts = facts_of(cap)
    want = SPLIT.partial(cap, facts)[0]
    packet, ts = cap.packets["packet"].to_numpy(np.int64), ns(cap.packets["ts"])
    for every in (max(1, len(packet) // 7), few):
        assert_same_partial(sliced_partial(SPLIT, cap, facts, clean_cuts(packet, ts, every))[0], want,
                            f"cut every {every} packets")


def with_frames(cap: Capture, frames: pd.DataFrame) -> Capture:
    return Capture(path=cap.path, ports=cap.ports, frames=frames, packets=cap.packets, connections=cap.connections,
                   anomalies=cap.anomalies, records=cap.records, summary=cap.summary)


@pytest.mark.parametrize("large_body_bytes", one_fast([1, messages_module.LARGE_BODY_BYTES], keep=messages_module.LARGE_BODY_BYTES))
def test_slices_of_time_count_the_frames_of_other_channels_during_a_large_transfer(monkeypatch, large_body_bytes):
    """huge-messages.pcap.gz with every 7th body frame of channel 2 put on channel 1 (the
    recording has no other channel's frame during a transfer; those join channel 1's last
    message), two large messages kept per connection, every message large from its header on or
    (the default size) three large only from their 100th body frame on, slices later: each large
    message's frames of other channels between its header and its last body frame are counted
    as the frames say, and slices of time give the whole's partial."""
    monkeypatch.setattr(messages_module, "LARGE_BODY_BYTES", large_body_bytes)
    monkeypatch.setattr(messages_module, "LARGE_ROWS_PER_CONNECTION", 2)
    cap = amqpcap.load(FIX / "huge-messages.pcap.gz")
    f = cap.frames.copy()
    moved = np.flatnonzero(((f["type"] == "body") & (f["channel"] == 2)).to_numpy(bool))[::7]
    f.loc[moved, "channel"] = np.int32(1)
    cap = with_frames(cap, f)
    large = SPLIT.partial(cap, facts_of(cap))[0]["large"]
    assert len(large) == 2 and large["refused"].sum() == 1 and (large["other_channel_frames_during"] > 0).any()
    channel, kind = f["channel"].to_numpy(), f["type"].to_numpy(object)
    direction, packet = f["direction"].to_numpy(object), f["packet"].to_numpy()
    for m in large.itertuples():
        mine = np.flatnonzero((channel == m.channel) & (direction == m.direction))
        header = mine[(kind[mine] == "header") & (packet[mine] == m.packet)][0]
        last = mine[(mine > header) & (kind[mine] == "body")][m.body_frames - 1]
        others = (channel != 0) & (channel != m.channel) & (direction == m.direction)
        assert m.other_channel_frames_during == others[header:last].sum(), m
    sliced_and_whole(cap, 5)


def test_slices_of_time_give_the_median_body_size_of_many_sizes():
    """ten-consumers.pcap (13,099 messages) with body sizes drawn from 0 to 40, some unknown:
    each connection's median body size is pandas' median of its known sizes, also over slices of
    time (a histogram of the sizes carried)."""
    cap = amqpcap.load(FIX / "ten-consumers.pcap")
    f = cap.frames.copy()
    header = (f["type"] == "header").to_numpy(bool)
    sizes = np.random.default_rng(14).integers(0, 41, int(header.sum()))
    f.loc[header, "body_size"] = pd.array(np.where(sizes == 40, pd.NA, sizes), dtype="Int64")
    cap = with_frames(cap, f)
    conns = SPLIT.partial(cap, facts_of(cap))[0]["connections"].set_index("stream")
    want = f[header].groupby("stream")["body_size"].median()
    assert len(want) == 11 and (conns["body_bytes_p50"].reindex(want.index) == want.astype(float)).all()
    sliced_and_whole(cap, 300)
