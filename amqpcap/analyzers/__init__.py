"""One module per question; each registers itself with `@amqpcap.analysis.registry.analyzer(name)`.

sizes: packet sizes and throughput; latency: deliver→ack, ack→next-deliver, publish→confirm and
interleaving; consumers: unacked, prefetch and deficit over time; nagle: small segments and
delayed-ACK stalls; stalls: silent intervals and who is to blame.
"""

import pkgutil as _pkgutil


def names() -> list[str]:
    """The analyzers' names, without importing them (they import pandas and numpy: the command
    line lists them this way, `amqpcap.cli`): each module here is the analyzer of its name
    (`amqpcap.engine.registered.analyzers` checks it)."""
    return sorted(m.name for m in _pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
