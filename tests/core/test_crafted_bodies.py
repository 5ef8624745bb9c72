"""Message bodies: kept only when asked for (the bodies table), whole or marked incomplete."""

import amqpcap

import crafting as c


def opened(frame_max=131072):
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening(frame_max=frame_max))
    return conv


def message(channel, body, routing_key="rk", frame_max=131072):
    return [c.basic_publish(channel, routing_key=routing_key), *c.content(channel, body, frame_max=frame_max)]


BIG = bytes(range(256)) * 40  # 10,240 bytes, every byte value


def test_bodies_whole_split_empty_interleaved_and_delivered(tmp_path):
    conv = opened(frame_max=4096)
    conv.exchange([("c2s", c.channel_open(2)), ("s2c", c.channel_open_ok(2))])
    conv.send_frames("c2s", message(1, BIG, frame_max=4096))       # three body frames
    conv.send_frames("c2s", message(1, b""))                       # no body frame at all
    # two channels' frames interleaved (AMQP 0-9-1 §4.2.6 forbids it only within a channel)
    a, b = message(1, b"first-channel-one"), message(2, b"then-channel-two")
    conv.send_frames("c2s", [a[0], b[0], a[1], b[1], b[2], a[2]])
    conv.send_frames("s2c", [c.basic_deliver(1, delivery_tag=1), *c.content(1, b"delivered")])
    recs = conv.close().timed()
    path = c.write_pcap(tmp_path / "b.pcap", recs)

    assert c.load(path).bodies is None
    cap = c.load(path, bodies=True)
    got = cap.bodies
    assert list(got["body"]) == [BIG, b"", b"then-channel-two", b"first-channel-one", b"delivered"]
    assert got["complete"].all()
    assert list(got["body_size"]) == [len(x) for x in got["body"]]
    assert list(got["channel"]) == [1, 1, 2, 1, 1]
    assert list(got["direction"].astype(str)) == ["c2s"] * 4 + ["s2c"]
    # packet: the content header's, last_packet: the last body frame's (as the frames table says)
    f = cap.frames
    headers = f[f["type"] == "header"]
    assert sorted(got["packet"]) == sorted(headers["packet"])
    bodies = f[f["type"] == "body"]
    assert set(got["last_packet"]) - set(got["packet"]) <= set(bodies["packet"])
    assert got.loc[0, "last_packet"] == bodies["packet"].iloc[2]


def test_a_hole_in_a_body_and_the_end_of_the_capture(tmp_path):
    conv = opened()
    segs = conv.send_frames("c2s", message(1, b"x" * 3000), segment_sizes=[1000, 1000])
    conv.ack("s2c")  # the broker got everything: the capture dropped the middle segment
    conv.drop(segs[1])
    conv.send_frames("c2s", message(1, b"whole"))
    last = message(1, b"cut off by the end of the capture")
    conv.send_frames("c2s", last, segment_sizes=[len(last[0]) + len(last[1])])
    recs = conv.timed()[:-1]  # the capture ends before the last body frame
    cap = c.load(c.write_pcap(tmp_path / "h.pcap", recs), bodies=True)
    b = cap.bodies
    assert list(b["complete"]) == [False, True, False]
    body0 = b.loc[0, "body"]
    assert b.loc[0, "body_size"] == 3000 and 0 < len(body0) < 3000 and body0 == b"x" * len(body0)
    assert b.loc[1, "body"] == b"whole"
    assert b.loc[2, "body"] == b""


def test_max_body_bytes(tmp_path):
    conv = opened()
    for i in range(3):
        conv.send_frames("c2s", message(1, bytes([65 + i]) * 80))
    recs = conv.close().timed()
    cap = c.load(c.write_pcap(tmp_path / "m.pcap", recs), bodies=True, limits=amqpcap.Limits(max_body_bytes=100))
    b = cap.bodies
    assert list(b["body"]) == [b"A" * 80, b"B" * 20, b""]
    assert list(b["complete"]) == [True, False, False]
    assert any("140 bytes not kept" in w for w in cap.warnings)
