"""Independent reference for the latency analyzer, computed from tshark's own AMQP fields.

A plain loop over tshark's frames, written from the protocol rules and nothing of amqpcap:

- deliver→ack: basic.deliver / basic.get-ok (broker → client) are remembered per
  (tcp.stream, channel) by delivery tag; a client basic.ack / nack / reject settles the tag it
  names, or with multiple=1 every outstanding tag ≤ it (tag 0: all), AMQP 0-9-1 §1.8.3.13.
  Consumers started with no-ack=1 are skipped. channel.open starts a new tag space.
- publish→confirm: after confirm.select on a channel, the client's basic.publish frames are
  numbered 1, 2, …; the broker's basic.ack / basic.nack settle them the same way.

Usage: ``python tests/tshark_reference.py CAPTURE`` prints the counts and medians.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

FIELDS = [
    "frame.number", "frame.time_epoch", "tcp.stream", "tcp.srcport", "amqp.channel", "amqp.method.class",
    "amqp.method.method", "amqp.method.arguments.delivery_tag", "amqp.method.arguments.multiple",
    "amqp.method.arguments.consumer_tag", "amqp.method.arguments.no_ack", "amqp.method.arguments.redelivered",
]


def _split(value: str) -> list[str]:
    return value.split(",") if value else []


def tshark_methods(path: str, port: int = 5672) -> list[dict]:
    """One dict per AMQP method frame, in tshark's order.

    With -E occurrence=a several frames of a packet come as comma-separated lists. amqp.channel and
    amqp.method.class/method have one value per method frame only if we skip non-method frames,
    so the per-frame fields (channel, class, method) are taken from amqp.type-filtered runs;
    argument fields only occur for the methods that carry them, so they are consumed in order
    by the methods that have them."""
    cmd = ["tshark", "-r", path, "-o", "tcp.desegment_tcp_streams:TRUE", "-d", f"tcp.port=={port},amqp",
           "-Y", "amqp.type == 1", "-T", "fields", "-E", "occurrence=a", "-E", "separator=/t",
           "-e", "amqp.type"] + sum((["-e", f] for f in FIELDS), [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    frames = []
    for line in out.splitlines():
        cols = line.split("\t")
        types = _split(cols[0])
        v = dict(zip(FIELDS, cols[1:]))
        number, t, stream, srcport = int(v["frame.number"]), float(v["frame.time_epoch"]), int(v["tcp.stream"]), int(v["tcp.srcport"])
        channels = _split(v["amqp.channel"])
        # amqp.channel is given for every AMQP frame of the packet; keep those of method frames
        channels = [c for c, ty in zip(channels, types) if ty == "1"]
        classes, methods = _split(v["amqp.method.class"]), _split(v["amqp.method.method"])
        tags = iter(_split(v["amqp.method.arguments.delivery_tag"]))
        mults = iter(_split(v["amqp.method.arguments.multiple"]))
        ctags = iter(_split(v["amqp.method.arguments.consumer_tag"]))
        noacks = iter(_split(v["amqp.method.arguments.no_ack"]))
        for ch, cl, me in zip(channels, classes, methods):
            f = {"packet": number, "t": t, "stream": stream, "s2c": srcport == port, "channel": int(ch),
                 "method": (int(cl), int(me))}
            m = f["method"]
            if m in ((60, 60), (60, 71), (60, 80), (60, 90), (60, 120)):
                f["tag"] = int(next(tags))
            if m in ((60, 80), (60, 120)):
                f["multiple"] = next(mults) in ("1", "True")
            if m in ((60, 20), (60, 21), (60, 60), (60, 30), (60, 31)):
                f["consumer_tag"] = next(ctags, "")
            if m in ((60, 20), (60, 70)):
                f["no_ack"] = next(noacks) in ("1", "True")
            if m == (60, 71):
                pass  # get-ok has redelivered but no consumer tag
            frames.append(f)
    return frames


def _settle(outstanding: dict, tag: int, multiple: bool, t: float, out: list) -> None:
    if multiple:
        hit = [k for k in outstanding if tag == 0 or k <= tag]
    else:
        hit = [tag] if tag in outstanding else []
    for k in hit:
        out.append(t - outstanding.pop(k))


def reference(path: str, port: int = 5672) -> dict:
    frames = tshark_methods(path, port)
    deliveries: dict = {}      # (stream, channel) -> {tag: t}
    no_ack_consumers = set()   # (stream, channel, consumer tag)
    pending_consume: dict = {}  # (stream, channel) -> no_ack of the basic.consume awaiting consume-ok
    last_get_no_ack: dict = {}
    confirm_mode = set()
    publish_seq: dict = {}
    publishes: dict = {}
    dta, p2c = [], []
    n_deliveries = n_no_ack = 0
    for f in frames:
        key = (f["stream"], f["channel"])
        m = f["method"]
        if m == (20, 10):  # channel.open: new tag spaces
            deliveries.pop(key, None)
            confirm_mode.discard(key)
            publishes.pop(key, None)
            publish_seq.pop(key, None)
        elif m == (60, 20) and not f["s2c"]:
            if f.get("consumer_tag"):
                if f["no_ack"]:
                    no_ack_consumers.add(key + (f["consumer_tag"],))
            else:
                pending_consume[key] = f["no_ack"]
        elif m == (60, 21) and f["s2c"]:
            if pending_consume.pop(key, False):
                no_ack_consumers.add(key + (f["consumer_tag"],))
        elif m == (60, 70) and not f["s2c"]:
            last_get_no_ack[key] = f["no_ack"]
        elif m in ((60, 60), (60, 71)) and f["s2c"]:
            n_deliveries += 1
            no_ack = (key + (f.get("consumer_tag"),) in no_ack_consumers) if m == (60, 60) else last_get_no_ack.get(key, False)
            if no_ack:
                n_no_ack += 1
                continue
            deliveries.setdefault(key, {})[f["tag"]] = f["t"]
        elif m in ((60, 80), (60, 90), (60, 120)) and not f["s2c"]:
            _settle(deliveries.get(key, {}), f["tag"], f.get("multiple", False), f["t"], dta)
        elif m == (85, 10) and not f["s2c"]:
            confirm_mode.add(key)
            publish_seq[key] = 0
        elif m == (60, 40) and not f["s2c"] and key in confirm_mode:
            publish_seq[key] += 1
            publishes.setdefault(key, {})[publish_seq[key]] = f["t"]
        elif m in ((60, 80), (60, 120)) and f["s2c"]:
            _settle(publishes.get(key, {}), f["tag"], f.get("multiple", False), f["t"], p2c)
    return {
        "deliveries": n_deliveries, "no_ack": n_no_ack,
        "deliver_to_ack": dta, "publish_to_confirm": p2c,
        "unsettled": sum(len(v) for v in deliveries.values()),
        "unconfirmed": sum(len(v) for v in publishes.values()),
    }


if __name__ == "__main__":
    r = reference(sys.argv[1])
    for k in ("deliver_to_ack", "publish_to_confirm"):
        v = r[k]
        print(k, len(v), statistics.median(v) if v else None)
    print("deliveries", r["deliveries"], "no_ack", r["no_ack"], "unsettled", r["unsettled"], "unconfirmed", r["unconfirmed"])
