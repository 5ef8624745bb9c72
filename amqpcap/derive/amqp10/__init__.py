"""AMQP 1.0 (issue 50): what the `amqp10` analyzer derives from the `amqp10_frames` table, one
module per question (docs/amqp10.md lists every table's columns and the identity rules):

- frames: the table itself (`amqp10_frames`), typed as the core writes it, empty without it.
- serial: RFC 1982 serial-number arithmetic on 32-bit ids and counts (they wrap).
- sessions: a client channel paired with the broker's by begin's remote-channel; each frame's session.
- handles: each frame's link, from the attach that named the handle in its direction.
- deliveries: a row per delivery, with the disposition that settled it and its outcome.
- credit: each link's credit over time (granted, reported, used), its zero-credit time and refills.
- windows: each session's incoming windows over time (Part 2 §2.5.6).
- links: a row per link, with its transfers and its time at zero credit.

Every derivation here is of scope CONNECTION (a connection's rows depend on its frames alone) and
is a pure function of a frames table (``*_of``) kept per capture by `derivation` (``cap -> value``),
so the analyzer can run the same functions over the frames a partition's slices gathered.
"""
