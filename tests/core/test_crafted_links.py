"""Link types, IPv6, and capture file formats (pcap variants, pcapng, gzip)."""

import pandas as pd
import pytest

import crafting as c


def conversation(ipv6=False, **kw):
    if ipv6:
        kw.update(client=("fd00::1", 40000), broker=("fd00::2", 5672), hop_by_hop=True)
    conv = c.TcpConversation(**kw).handshake()
    conv.exchange(c.opening())
    conv.send_frames("c2s", [c.basic_publish(routing_key="a"),
                             *c.content(1, b"p" * 2500, delivery_mode=2)], segment_sizes=[100])
    conv.send_frames("s2c", [c.basic_deliver(delivery_tag=1),
                             *c.content(1, b"q" * 50, message_id="m")])
    conv.send_frames("c2s", [c.basic_ack(delivery_tag=1), c.heartbeat()])
    conv.close()
    return conv


# ---------------------------------------------------------------------------
# 14. link types and IPv6
# ---------------------------------------------------------------------------

VARIANTS = [("ether", False), ("vlan", False), ("sll", False), ("raw", False), ("null", False),
            ("ether", True), ("raw", True), ("sll", True)]


@pytest.mark.parametrize("link,ipv6", VARIANTS,
                         ids=[f"{l}-{'ipv6' if v6 else 'ipv4'}" for l, v6 in VARIANTS])
def test_link_types_give_identical_frames(tmp_path, link, ipv6):
    ref = conversation()
    ref_recs = ref.timed()
    ref_cap = c.load(c.write_pcap(tmp_path / "ref.pcap", ref_recs, link="ether"))
    c.assert_frames(ref_cap.frames, c.expected_frames(ref_recs, ref))

    conv = conversation(ipv6=ipv6)
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / f"{link}.pcap", recs, link=link))

    pd.testing.assert_frame_equal(c.comparable(cap.frames, drop=()),
                                  c.comparable(ref_cap.frames, drop=()))
    same = ["packet", "ts", "stream", "direction", "payload_bytes", "seq", "ack", "flags",
            "window", "tsval", "tsecr", "frames_ended", "retransmission", "gap_before"]
    pd.testing.assert_frame_equal(c.comparable(cap.packets[same], drop=()),
                                  c.comparable(ref_cap.packets[same], drop=()))
    assert list(cap.packets["frame_len"]) == [len(p.frame_bytes(link)) for p in recs]
    conn = cap.connections.iloc[0]
    assert conn["client_addr"] == ("fd00::1" if ipv6 else "10.0.0.1")
    assert conn["broker_addr"] == ("fd00::2" if ipv6 else "10.0.0.2")
    assert conn["mss_c2s"] == 1460 and conn["window_scale_s2c"] == 9
    assert cap.anomalies.empty, cap.anomalies.to_string()


# ---------------------------------------------------------------------------
# 16. file formats
# ---------------------------------------------------------------------------

def test_pcapng_two_interfaces_two_resolutions(tmp_path):
    conv = conversation()
    recs = conv.timed(t0_ns=1_700_000_000_123_456_000)
    # client packets: Ethernet at ns resolution (with sub-µs digits);
    # broker packets: raw IP at µs resolution
    for r in recs:
        if r.direction == "c2s":
            r.time_ns += 789
    ifaces = [c.Interface("ether", tsresol=9), c.Interface("raw", tsresol=6)]
    path = c.write_pcapng(tmp_path / "two.pcapng", ifaces,
                          [(0 if r.direction == "c2s" else 1, r) for r in recs])
    cap = c.load(path)

    assert list(cap.packets["ts"]) == [c.ts(r.time_ns) for r in recs]
    assert cap.packets["ts"].dt.nanosecond.max() == 789
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    assert set(cap.frames["direction"]) == {"c2s", "s2c"}
    assert list(cap.packets["frame_len"]) == [
        len(r.frame_bytes("ether" if r.direction == "c2s" else "raw")) for r in recs]
    assert cap.summary["format"] == "pcapng"
    assert cap.summary["packets"] == len(recs)
    assert len(cap.summary["link_types"]) == 2
    assert cap.summary["first_ts"] == c.ts(recs[0].time_ns)
    assert cap.summary["last_ts"] == c.ts(recs[-1].time_ns)
    assert cap.anomalies.empty, cap.anomalies.to_string()


def test_pcapng_tsoffset(tmp_path):
    conv = conversation()
    recs = conv.timed(t0_ns=1_700_000_000_000_000_321)
    ifaces = [c.Interface("ether", tsresol=9, tsoffset=1_600_000_000)]
    cap = c.load(c.write_pcapng(tmp_path / "off.pcapng", ifaces, [(0, r) for r in recs]))
    assert list(cap.packets["ts"]) == [c.ts(r.time_ns) for r in recs]
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))


@pytest.mark.parametrize("endian", ["<", ">"], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("nano", [False, True], ids=["usec", "nsec"])
def test_pcap_variants(tmp_path, endian, nano):
    conv = conversation()
    recs = conv.timed()  # T0 has nanosecond digits
    cap = c.load(c.write_pcap(tmp_path / "v.pcap", recs, endian=endian, nano=nano))

    if nano:
        want = [c.ts(r.time_ns) for r in recs]
    else:
        want = [c.ts(r.time_ns // 1000 * 1000) for r in recs]
    assert list(cap.packets["ts"]) == want
    exp = c.expected_frames(recs, conv)
    for e in exp:
        e["ts"] = want[e["packet"] - 1]
    c.assert_frames(cap.frames, exp)
    assert cap.summary["format"] == "pcap"
    assert cap.anomalies.empty, cap.anomalies.to_string()


def test_gzip_loads_identically(tmp_path):
    conv = conversation()
    recs = conv.timed()
    plain = c.load(c.write_pcap(tmp_path / "a.pcap", recs, nano=True))
    gz = c.load(c.write_pcap(tmp_path / "a.pcap.gz", recs, nano=True, compress=True))
    for name in ("frames", "packets", "connections", "anomalies"):
        pd.testing.assert_frame_equal(getattr(gz, name), getattr(plain, name), obj=name)
    assert gz.summary["compressed"] is True or gz.summary["compressed"] == True  # noqa: E712
    assert not plain.summary["compressed"]
    assert gz.summary["file_bytes"] == (tmp_path / "a.pcap.gz").stat().st_size
    assert plain.summary["file_bytes"] == (tmp_path / "a.pcap").stat().st_size
    c.assert_frames(gz.frames, c.expected_frames(recs, conv))


def test_gzip_pcapng_without_gz_suffix(tmp_path):
    """Compression is detected from the content, not the file name."""
    conv = conversation()
    recs = conv.timed(t0_ns=1_700_000_000_000_000_000)
    path = c.write_pcapng(tmp_path / "x.pcapng", [c.Interface("ether", 9)], [(0, r) for r in recs])
    import gzip
    (tmp_path / "x.capture").write_bytes(gzip.compress(path.read_bytes()))
    cap = c.load(tmp_path / "x.capture")
    assert cap.summary["compressed"]
    assert cap.summary["format"] == "pcapng"
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
