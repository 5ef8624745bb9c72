"""Method argument and content property decoding (frames and connections tables)."""

import pandas as pd
import pytest

import crafting as c

# frames columns from docs/tables.md
BASE_COLUMNS = ["packet", "first_packet", "ts", "stream", "direction", "channel", "type",
                "size_bytes", "class_id", "method_id", "method"]
ARG_COLUMNS = ["consumer_tag", "delivery_tag", "redelivered", "exchange", "routing_key",
               "multiple", "requeue", "mandatory", "queue", "no_ack", "prefetch_count",
               "prefetch_size", "global", "active", "nowait", "frame_max", "channel_max",
               "heartbeat_s", "vhost", "mechanism", "user", "client_product",
               "client_version", "client_platform", "connection_name", "server_product",
               "server_version", "reply_code", "reply_text", "reason", "message_count",
               "consumer_count", "body_size", "delivery_mode", "priority", "content_type",
               "correlation_id", "reply_to", "expiration", "message_id",
               "message_timestamp"]
CATEGORIES = ["direction", "type", "method", "consumer_tag", "exchange", "routing_key", "queue",
              "vhost", "mechanism", "user", "client_product", "client_version",
              "client_platform", "connection_name", "server_product", "server_version",
              "reply_text", "reason", "content_type", "correlation_id", "reply_to",
              "expiration", "message_id"]

BIG_TAG = 2**64 - 2  # needs the full unsigned 64-bit range


def amqplain_response(user, password):
    """AMQPLAIN: a field table without its length prefix."""
    return c.table({"LOGIN": user, "PASSWORD": password})[4:]


def full_conversation(mechanism="PLAIN"):
    response = (c.PLAIN_RESPONSE if mechanism == "PLAIN"
                else amqplain_response(c.USER, c.PASSWORD))
    conv = c.TcpConversation().handshake()
    ch = 3
    conv.exchange([
        ("c2s", c.PROTOCOL_HEADER),
        ("s2c", c.connection_start(product="RabbitMQ", version="3.13.7")),
        ("c2s", c.connection_start_ok(product="my-client", version="9.8.7",
                                      platform="Python ünïcode", connection_name="orders-worker",
                                      mechanism=mechanism, response=response)),
        ("s2c", c.connection_tune(channel_max=2047, frame_max=131072, heartbeat=60)),
        ("c2s", c.connection_tune_ok(channel_max=100, frame_max=65536, heartbeat=30)),
        ("c2s", c.connection_open(vhost="/prod")),
        ("s2c", c.connection_open_ok()),
        ("c2s", c.channel_open(ch)),
        ("s2c", c.channel_open_ok(ch)),
        ("c2s", c.basic_qos(ch, prefetch_size=4096, prefetch_count=250, global_=True)),
        ("s2c", c.basic_qos_ok(ch)),
        ("c2s", c.queue_declare(ch, queue="work", nowait=False, arguments={"x-queue-type": "quorum"})),
        ("s2c", c.queue_declare_ok(ch, queue="work", message_count=17, consumer_count=2)),
        ("c2s", c.basic_consume(ch, queue="work", consumer_tag="amq.ctag-XYZ", no_ack=True)),
        ("s2c", c.basic_consume_ok(ch, consumer_tag="amq.ctag-XYZ")),
        ("c2s", [c.basic_publish(ch, exchange="orders", routing_key="orders.created",
                                 mandatory=True),
                 *c.content(ch, b'{"id": 1}', content_type="application/json",
                            content_encoding="utf-8", headers={"x-retry": 1, "h": "v"},
                            delivery_mode=2, priority=7, correlation_id="corr-42",
                            reply_to="amq.rabbitmq.reply-to", expiration="60000",
                            message_id="msg-1", timestamp=1_700_000_000, type="order",
                            user_id="guest", app_id="shop", cluster_id="")]),
        ("s2c", [c.basic_deliver(ch, consumer_tag="amq.ctag-XYZ", delivery_tag=BIG_TAG,
                                 redelivered=True, exchange="orders",
                                 routing_key="orders.created"),
                 *c.content(ch, b'{"id": 1}', delivery_mode=1, correlation_id="corr-42")]),
        ("c2s", c.basic_ack(ch, delivery_tag=BIG_TAG, multiple=True)),
        ("c2s", c.basic_nack(ch, delivery_tag=7, multiple=False, requeue=True)),
        ("s2c", [c.basic_return(ch, reply_code=312, reply_text="NO_ROUTE", exchange="orders",
                                routing_key="nowhere"), *c.content(ch, b"")]),
        ("c2s", c.channel_close(ch, reply_code=200, reply_text="bye")),
        ("s2c", c.channel_close_ok(ch)),
        ("c2s", c.connection_close(reply_code=320, reply_text="CONNECTION_FORCED - shutdown")),
        ("s2c", c.connection_close_ok()),
    ])
    conv.close()
    return conv


@pytest.fixture(params=["PLAIN", "AMQPLAIN"])
def decoded(request, tmp_path):
    conv = full_conversation(request.param)
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "methods.pcap", recs))
    return conv, recs, cap, request.param


def test_every_documented_argument(decoded):
    conv, recs, cap, mechanism = decoded
    expected = c.expected_frames(recs, conv)
    c.assert_frames(cap.frames, expected)
    # and every argument column a row's frame does not carry is empty
    problems = []
    for i, (exp, (_, row)) in enumerate(zip(expected, cap.frames.iterrows())):
        for col in ARG_COLUMNS:
            if col not in exp and col in row.index and not pd.isna(row[col]):
                problems.append(f"row {i} {exp.get('method') or exp['type']}: "
                                f"{col} = {row[col]!r}, expected <NA>")
    assert not problems, "\n".join(problems)
    assert cap.anomalies.empty, cap.anomalies.to_string()


def test_frames_columns_and_dtypes(decoded):
    """The columns (and dtypes) are the documented ones, also for a frame of every kind."""
    from test_docs import documented, dtype_ok

    _, _, cap, _ = decoded
    assert set(cap.frames.columns) == set(BASE_COLUMNS + ARG_COLUMNS)
    doc = documented("frames")
    assert set(doc) == set(cap.frames.columns)
    for col in cap.frames.columns:
        assert dtype_ok(cap.frames[col].dtype, doc[col]), (col, cap.frames[col].dtype, doc[col])
    for col in CATEGORIES:
        assert str(cap.frames[col].dtype) == "category", (col, cap.frames[col].dtype)


def test_connection_row(decoded):
    _, _, cap, mechanism = decoded
    conn = cap.connections.iloc[0]
    expected = dict(frame_max=65536, channel_max=100, heartbeat_s=30, vhost="/prod",
                    user="guest", mechanism=mechanism, client_product="my-client",
                    client_version="9.8.7", client_platform="Python ünïcode",
                    connection_name="orders-worker", server_product="RabbitMQ",
                    server_version="3.13.7", protocol_header_seen=True)
    for k, v in expected.items():
        assert conn[k] == v, (k, conn[k], v)


def test_password_never_in_any_table(decoded):
    _, _, cap, _ = decoded
    text = c.all_cells_as_text(cap)
    assert c.PASSWORD not in text
    assert "secret" not in text


def test_user_with_invalid_utf8(tmp_path):
    """Text from the wire is UTF-8 with invalid bytes replaced by U+FFFD."""
    conv = c.TcpConversation().handshake()
    items = c.opening()
    items[2] = ("c2s", c.connection_start_ok(response=b"\x00gu\xffest\x00" + c.PASSWORD.encode(),
                                             user="gu\ufffdest"))
    conv.exchange(items)
    pub = c.basic_publish(routing_key=b"k\xfe")
    pub.expect["routing_key"] = "k\ufffd"
    conv.send_frames("c2s", [pub])
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "u.pcap", recs))
    c.assert_frames(cap.frames, c.expected_frames(recs, conv),
                    columns=["user", "method", "routing_key"])
    assert cap.connections.iloc[0]["user"] == "gu\ufffdest"
    assert c.PASSWORD not in c.all_cells_as_text(cap)


# ---------------------------------------------------------------------------
# 13. flow control, confirms, negative acknowledgements
# ---------------------------------------------------------------------------

def test_flow_confirm_nack_reject(tmp_path):
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    conv.exchange([
        ("s2c", c.connection_blocked(reason="low on memory")),
        ("s2c", c.connection_unblocked()),
        ("s2c", c.connection_blocked(reason="low on disk")),
        ("s2c", c.channel_flow(1, active=False)),
        ("c2s", c.channel_flow_ok(1, active=False)),
        ("s2c", c.channel_flow(1, active=True)),
        ("c2s", c.channel_flow_ok(1, active=True)),
        ("c2s", c.confirm_select(1, nowait=False)),
        ("s2c", c.confirm_select_ok(1)),
        ("c2s", c.channel_open(2)),
        ("s2c", c.channel_open_ok(2)),
        ("c2s", c.confirm_select(2, nowait=True)),
        ("s2c", c.basic_nack(1, delivery_tag=10, multiple=True, requeue=False)),
        ("s2c", c.basic_nack(1, delivery_tag=11, multiple=False, requeue=True)),
        ("c2s", c.basic_nack(2, delivery_tag=12, multiple=True, requeue=True)),
        ("c2s", c.basic_nack(2, delivery_tag=13, multiple=False, requeue=False)),
        ("c2s", c.basic_reject(1, delivery_tag=14, requeue=False)),
        ("c2s", c.basic_reject(1, delivery_tag=15, requeue=True)),
    ])
    recs = conv.timed()
    cap = c.load(c.write_pcap(tmp_path / "flow.pcap", recs))

    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    f = cap.frames
    blocked = f[f["method"] == "connection.blocked"]
    assert list(blocked["reason"]) == ["low on memory", "low on disk"]
    assert list(blocked["channel"]) == [0, 0]
    assert list(f[f["method"] == "channel.flow"]["active"]) == [False, True]
    assert list(f[f["method"] == "channel.flow-ok"]["active"]) == [False, True]
    sel = f[f["method"] == "confirm.select"]
    assert list(sel["nowait"]) == [False, True]
    assert list(sel["class_id"]) == [85, 85] and list(sel["method_id"]) == [10, 10]
    nacks = f[f["method"] == "basic.nack"]
    assert list(zip(nacks["delivery_tag"], nacks["multiple"], nacks["requeue"])) == \
        [(10, True, False), (11, False, True), (12, True, True), (13, False, False)]
    rejects = f[f["method"] == "basic.reject"]
    assert list(zip(rejects["delivery_tag"], rejects["requeue"])) == [(14, False), (15, True)]
    assert rejects["multiple"].isna().all()
    assert cap.anomalies.empty, cap.anomalies.to_string()


def test_secure_and_update_secret_are_never_decoded(tmp_path):
    """connection.secure/secure-ok carry a SASL challenge and response, update-secret a new
    secret (RabbitMQ extension, class 10 method 70): their rows have the method and the reason,
    never the secret."""
    conv = c.TcpConversation().handshake()
    conv.exchange(c.opening())
    challenge, response, secret = b"challenge-0x3c1d-crafted", b"response-0x9b4e-crafted", b"new-secret-0x5f3a-crafted"
    conv.exchange([
        ("s2c", c.method_frame(0, 10, 20, c.longstr(challenge), "connection.secure")),
        ("c2s", c.method_frame(0, 10, 21, c.longstr(response), "connection.secure-ok")),
        ("c2s", c.method_frame(0, 10, 70, c.longstr(secret) + c.shortstr("token refresh"),
                               "connection.update-secret", reason="token refresh")),
        ("s2c", c.method_frame(0, 10, 71, b"", "connection.update-secret-ok")),
    ])
    recs = conv.close().timed()
    path = c.write_pcap(tmp_path / "s.pcap", recs)
    assert secret in path.read_bytes()
    cap = c.load(path)
    c.assert_frames(cap.frames, c.expected_frames(recs, conv))
    text = c.all_cells_as_text(cap)
    for s in (challenge, response, secret):
        assert s.decode() not in text
    assert "token refresh" in text
