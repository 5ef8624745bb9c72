"""Content framing: very large bodies and many frames per segment."""

import pytest

import crafting as c
from tiers import one_fast

BODY_SIZE = 5 * 1024 * 1024


# ---------------------------------------------------------------------------
# 7. a 5 MB body
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("frame_max", one_fast([131072, 0], keep=131072), ids=["frame_max-131072", "unlimited"])
@pytest.mark.parametrize("direction", ["c2s", "s2c"])
def test_five_megabyte_body(tmp_path, frame_max, direction):
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening(frame_max=frame_max))
    body = bytes(range(256)) * (BODY_SIZE // 256)
    first = c.basic_publish() if direction == "c2s" else c.basic_deliver()
    msg = c.content(1, body, frame_max=frame_max, delivery_mode=2)
    conv.send_frames(direction, [first, *msg], segment_sizes=16000)  # TSO-sized segments
    conv.ack(c.OTHER[direction])
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "big.pcap", recs))

    bodies = cap.frames[cap.frames["type"] == "body"]
    header = cap.frames[cap.frames["type"] == "header"]
    n_body = -(-BODY_SIZE // (frame_max - 8)) if frame_max else 1
    assert len(msg) == 1 + n_body
    assert len(bodies) == n_body
    assert bodies["size_bytes"].sum() == BODY_SIZE == header.iloc[0]["body_size"]
    if frame_max:
        assert (bodies["size_bytes"] <= frame_max - 8).all()
    else:
        assert list(bodies["size_bytes"]) == [BODY_SIZE]
    assert (bodies["direction"] == direction).all()
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    assert cap.anomalies.empty, cap.anomalies.to_string()
    conn = cap.connections.iloc[0]
    assert conn["frame_max"] == frame_max
    assert conn[f"{direction}_bytes_decoded"] == len(conv.data[direction])


# ---------------------------------------------------------------------------
# 8. several frames in one segment
# ---------------------------------------------------------------------------

def test_publish_in_one_segment(tmp_path):
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    frames = [c.basic_publish(routing_key="one"), *c.content(1, b"body", message_id="m1")]
    (seg,) = conv.send_frames("c2s", frames)
    conv.ack("s2c")
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "p.pcap", recs))

    n = c.number(recs, seg)
    mine = cap.frames[cap.frames["packet"] == n]
    assert list(mine["type"]) == ["method", "header", "body"]
    assert (mine["first_packet"] == n).all()
    assert cap.packets.set_index("packet").loc[n, "frames_ended"] == 3
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))


def test_many_deliveries_and_straddling_segments(tmp_path):
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    conv.send_frames("c2s", [c.basic_consume(consumer_tag="ct")])
    conv.send_frames("s2c", [c.basic_consume_ok(consumer_tag="ct")])
    deliveries = []
    for tag in range(1, 7):
        deliveries += [c.basic_deliver(consumer_tag="ct", delivery_tag=tag),
                       *c.content(1, b"m%d" % tag * 10, correlation_id=f"c{tag}")]
    whole = conv.send_frames("s2c", deliveries[:12])  # four deliveries, one segment
    total = sum(len(f) for f in deliveries[12:])
    # the rest cut at arbitrary points: the first segment ends inside a frame
    parts = conv.send_frames("s2c", deliveries[12:], segment_sizes=[40, total - 40 - 7])
    conv.send_frames("c2s", [c.basic_ack(delivery_tag=6, multiple=True)])
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "d.pcap", recs))

    expected = c.expected_frames(recs, conv)
    c.assert_frames(cap.frames, expected)
    ended = cap.packets.set_index("packet")["frames_ended"]
    assert len(whole) == 1 and ended[c.number(recs, whole[0])] == 12
    for p in parts:
        n = c.number(recs, p)
        assert ended[n] == sum(e["packet"] == n for e in expected)
    # 40 bytes hold the 5th basic.deliver and the start of its header; the last
    # 7 bytes are the end of the last body frame
    assert len(deliveries[12]) < 40 < len(deliveries[12]) + len(deliveries[13])
    assert len(deliveries[-1]) > 7
    assert [ended[c.number(recs, p)] for p in parts] == [1, 4, 1]
    assert (cap.frames[cap.frames["packet"] == c.number(recs, whole[0])]["first_packet"]
            == c.number(recs, whole[0])).all()
    assert list(cap.frames[cap.frames["method"] == "basic.deliver"]["delivery_tag"]) == \
        list(range(1, 7))
