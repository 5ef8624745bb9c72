"""Malformed AMQP and damaged files: the anomaly rows and what is still decoded."""

import pandas as pd

import crafting as c


def opened():
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    return conv


def test_bad_frame_end_then_resync(tmp_path):
    conv = opened()
    good = c.basic_publish(routing_key="good")
    bad = c.Frame(bytes(c.basic_publish(routing_key="bad"))[:-1] + b"\x00", {})
    (seg,) = conv.send_frames("c2s", [bad, good])
    conv.frame_log = [x for x in conv.frame_log if x[2] is not bad]
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "b.pcap", recs))

    rows = c.kinds(cap, "bad-frame-end")
    assert len(rows) == 1, cap.anomalies.to_string()
    assert (rows.iloc[0]["stream"], rows.iloc[0]["direction"], rows.iloc[0]["packet"]) == \
        (0, "c2s", c.number(recs, seg))
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    assert "bad" not in set(cap.frames["routing_key"].dropna())
    conn = cap.connections.iloc[0]
    assert conn["c2s_bytes_skipped"] == len(bad)
    assert conn["c2s_bytes_decoded"] == len(conv.data["c2s"]) - len(bad)


def test_other_protocol_version(tmp_path):
    conv = c.TcpConversation().handshake()
    (seg,) = conv.send("c2s", b"AMQP\x00\x00\x0a\x00")  # AMQP 0-10
    conv.send("s2c", b"AMQP\x00\x00\x09\x01")           # the broker answers with its version
    conv.close()
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "v.pcap", recs))
    rows = c.kinds(cap, "protocol-header")
    assert len(rows) >= 1, cap.anomalies.to_string()
    assert (rows.iloc[0]["direction"], rows.iloc[0]["packet"]) == ("c2s", c.number(recs, seg))
    assert cap.frames.empty


def test_file_cut_mid_record(tmp_path):
    conv = opened()
    conv.send_frames("c2s", [c.basic_publish(), *c.content(1, b"k" * 500)])
    recs = conv.timed()
    path = c.write_pcap(tmp_path / "cut.pcap", recs)
    data = path.read_bytes()
    path.write_bytes(data[:-100])  # tcpdump killed while writing the last record
    cap = c.load(path)

    assert cap.summary["truncated"]
    rows = c.kinds(cap, "capture-truncated")
    assert len(rows) == 1, cap.anomalies.to_string()
    assert pd.isna(rows.iloc[0]["stream"]) and pd.isna(rows.iloc[0]["direction"])
    assert cap.summary["packets"] == len(recs) - 1
    complete = recs[:-1]
    c.assert_frames(cap.frames, c.expected_frames(complete, conv))


def test_unknown_method_is_reported_and_skipped(tmp_path):
    conv = opened()
    weird = c.Frame(c.raw_frame(c.FRAME_METHOD, 1, c.short(60) + c.short(999) + b"xyz"), {})
    (seg,) = conv.send_frames("c2s", [weird, c.basic_ack(1, delivery_tag=3)])
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "u.pcap", recs))
    rows = c.kinds(cap, "unknown-method")
    assert len(rows) == 1, cap.anomalies.to_string()
    assert (rows.iloc[0]["direction"], rows.iloc[0]["packet"]) == ("c2s", c.number(recs, seg))
    acks = cap.frames[cap.frames["method"] == "basic.ack"]
    assert list(acks["delivery_tag"]) == [3]
