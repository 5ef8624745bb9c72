"""amqp10: AMQP 1.0 connections (issue 50): their links, how their deliveries were settled, link
credit, and the findings these prove (docs/analyzers/amqp10.md). The derivations are in
`amqpcap.derive.amqp10`; the findings in `findings.py`."""

from .analyzer import Amqp10

__all__ = ["Amqp10"]
