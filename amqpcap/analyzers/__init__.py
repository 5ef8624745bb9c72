"""One module per question; each registers itself with `@amqpcap.analysis.analyzer(name)`.

sizes: packet sizes and throughput; latency: deliver→ack, ack→next-deliver, publish→confirm and
interleaving; consumers: unacked, prefetch and deficit over time; nagle: small segments and
delayed-ACK stalls; stalls: silent intervals and who is to blame.
"""
