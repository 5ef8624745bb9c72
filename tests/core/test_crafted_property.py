"""Property: segmentation never changes what is decoded.

A random valid AMQP conversation is written twice: once with every frame in
its own segment, once with each direction's bytes cut at random points.  The
frames tables must agree on everything except the columns that depend on
packet boundaries (packet, first_packet, ts), and each must match the
reference reassembly of tests/crafting.py exactly.
"""

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import crafting as c

shortstrs = st.text(max_size=12)
channels = st.integers(1, 65535)
tags = st.integers(0, 2**64 - 1)
props = st.fixed_dictionaries({}, optional={
    "content_type": shortstrs, "delivery_mode": st.sampled_from([1, 2]),
    "priority": st.integers(0, 9), "correlation_id": shortstrs, "reply_to": shortstrs,
    "expiration": st.integers(0, 10**6).map(str), "message_id": shortstrs,
    "timestamp": st.integers(0, 2**33), "headers": st.dictionaries(shortstrs, st.integers(-2**63, 2**63 - 1), max_size=3),
})
bodies = st.integers(0, 3000).map(lambda n: b"B" * n)


# (channel, [content header, body frames...]) of one message
contents = st.builds(lambda ch, body, p: (ch, c.content(ch, body, **p)), channels, bodies, props)

item = st.one_of(
    st.tuples(st.just("c2s"), st.builds(
        lambda ex, rk, m, cm: [c.basic_publish(cm[0], ex, rk, m), *cm[1]],
        shortstrs, shortstrs, st.booleans(), contents)),
    st.tuples(st.just("s2c"), st.builds(
        lambda ct, tag, red, ex, rk, cm: [c.basic_deliver(cm[0], ct, tag, red, ex, rk), *cm[1]],
        shortstrs, tags, st.booleans(), shortstrs, shortstrs, contents)),
    st.tuples(st.just("c2s"), st.builds(lambda ch, t, m: [c.basic_ack(ch, t, m)],
                                        channels, tags, st.booleans())),
    st.tuples(st.just("s2c"), st.builds(lambda ch, t, m, r: [c.basic_nack(ch, t, m, r)],
                                        channels, tags, st.booleans(), st.booleans())),
    st.tuples(st.just("c2s"), st.builds(lambda ch, t, r: [c.basic_reject(ch, t, r)],
                                        channels, tags, st.booleans())),
    st.tuples(st.just("c2s"), st.builds(lambda ch, s, n, g: [c.basic_qos(ch, s, n, g)],
                                        channels, st.integers(0, 2**32 - 1),
                                        st.integers(0, 65535), st.booleans())),
    st.tuples(st.sampled_from(["c2s", "s2c"]), st.builds(lambda: [c.heartbeat()])),
    st.tuples(st.just("s2c"), st.builds(lambda r: [c.connection_blocked(r)], shortstrs)),
)


def build(items, cut):
    """cut(direction, total_length) -> segment sizes for a run of same-direction items
    (None: one frame per segment)."""
    conv = c.TcpConversation().handshake()
    runs = []
    for d, frames in list(c.opening()) + items:
        frames = frames if isinstance(frames, list) else [frames]
        if runs and runs[-1][0] == d:
            runs[-1][1].extend(frames)
        else:
            runs.append((d, list(frames)))
    for d, frames in runs:
        if cut is None:
            for f in frames:
                conv.send_frames(d, [f], segment_sizes=len(f))
        else:
            conv.send_frames(d, frames, segment_sizes=cut(d, sum(len(f) for f in frames)))
    conv.close()
    return conv, conv.timed()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(items=st.lists(item, min_size=1, max_size=12), data=st.data())
def test_resegmentation_does_not_change_frames(tmp_path_factory, items, data):
    tmp = tmp_path_factory.mktemp("reseg")

    def cut(d, total):
        points = data.draw(st.sets(st.integers(1, max(total - 1, 1)), max_size=8), label=d)
        points = sorted(p for p in points if p < total)
        edges = [0] + points + [total]
        return [b - a for a, b in zip(edges, edges[1:])]

    one, one_recs = build(items, None)
    many, many_recs = build(items, cut)
    cap1 = c.load(c.write_pcap(tmp / "one.pcap", one_recs))
    capn = c.load(c.write_pcap(tmp / "many.pcap", many_recs))

    c.assert_frames(cap1.frames, c.expected_frames(one_recs, one))
    c.assert_frames(capn.frames, c.expected_frames(many_recs, many))
    pd.testing.assert_frame_equal(c.comparable(capn.frames), c.comparable(cap1.frames))
    assert cap1.anomalies.empty and capn.anomalies.empty, capn.anomalies.to_string()
    for cap, recs in ((cap1, one_recs), (capn, many_recs)):
        ended = cap.packets.set_index("packet")["frames_ended"]
        assert ended.sum() == len(cap.frames)
        conn = cap.connections.iloc[0]
        assert conn["c2s_bytes_decoded"] == len(one.data["c2s"])
        assert conn["s2c_bytes_decoded"] == len(one.data["s2c"])
