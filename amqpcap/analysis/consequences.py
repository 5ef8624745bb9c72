"""One finding per cause: a finding whose mechanism is the consequence of another finding already
raised on the same connection is folded into that one, as its evidence, not told as a second problem.

Analyzers never see each other's findings (each is a tap over the rows); this is the one place
where the findings of every analyzer meet, before anything is shown: the console, summary.json,
report.html and the verdict all read `settled(results)`.

A rule says which finding (the consequence) a cause explains, and checks on the wire numbers of
both subjects that the cause's mechanism is what produced the consequence on that connection:
sharing a connection is not enough. A subject explained is removed from the consequence; a
consequence left with no subject is removed, and the cause's evidence lists what it explains
(``explains``: the consequence's id, title, the streams and why). A consequence with subjects
left keeps them, and says which of its subjects were explained and by what
(``explained_in_part``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from .registry import AnalyzerResult, Finding, rank

#: small-packets' ``carries`` (what the small segments hold) that a one-message-at-a-time
#: pattern produces by itself: a client that publishes one message and then waits (for
#: tx.commit-ok, for a confirm) or is answered one message at a time (basic.return) has nothing
#: queued to coalesce a write with, so even its frames leave one per segment ("split": pika on
#: fixtures/transactions-busy.pcap and unroutable-busy.pcap, 2,000 messages each); the pattern,
#: not the write calls, is what to change first. Acks alone in their segments are not this.
ONE_AT_A_TIME_CARRIES = ("message", "split", "other")

#: publish-and-wait's wait is Nagle's when Nagle's median stall on the same connection is at least
#: this share of the median confirm latency: the confirm comes back only after the held write
#: (the rest of the wait is the broker's work and the round trip). On the write-write-read fixture:
#: 43.3 ms stalls in 43.8 ms confirms (99%).
NAGLE_SHARE_OF_WAIT = 0.5


@dataclass(frozen=True)
class Rule:
    consequence: str  # the finding explained
    cause: str  # the finding that explains it
    why: str  # told in the cause's evidence
    #: whether the cause's subject explains the consequence's subject on the same stream
    explains: Callable[[dict[str, Any], dict[str, Any]], bool]


def _carries_one_at_a_time(small: dict[str, Any], _cause: dict[str, Any]) -> bool:
    return small.get("direction") == "c2s" and small.get("carries") in ONE_AT_A_TIME_CARRIES


def _acks_one_per_message(small: dict[str, Any], _cause: dict[str, Any]) -> bool:
    return small.get("direction") == "c2s" and small.get("carries") == "ack"


def _wait_is_nagle(wait: dict[str, Any], nagle: dict[str, Any]) -> bool:
    stall, confirm = nagle.get("median_stall_s"), wait.get("confirm_latency_p50_s")
    return (nagle.get("direction") == "c2s" and stall is not None and confirm is not None and confirm > 0
            and stall >= NAGLE_SHARE_OF_WAIT * confirm)


RULES = (
    Rule("small-packets", "transactions", "a transaction per message: each publish is written and committed on its "
         "own, so its segments cannot be coalesced; batching the publishes in a transaction removes both",
         _carries_one_at_a_time),
    Rule("small-packets", "publish-and-wait", "each publish waits for the previous confirm, so it leaves alone in "
         "its segment; publishing in batches before waiting removes both", _carries_one_at_a_time),
    Rule("small-packets", "unroutable-messages", "the mandatory publishes are written one by one and answered one "
         "basic.return each; binding the routing key (or dropping mandatory) removes the traffic itself",
         _carries_one_at_a_time),
    Rule("small-packets", "prefetch-one", "at prefetch 1 the consumer can only ever acknowledge one message, so "
         "every ack leaves alone in its segment; a larger prefetch with multiple acks removes both",
         _acks_one_per_message),
    Rule("publish-and-wait", "nagle-delayed-ack", "the wait for each confirm is Nagle holding the publish until the "
         "broker's delayed ACK; writing the message in one send (or TCP_NODELAY) removes both", _wait_is_nagle),
)


def settled(results: list[AnalyzerResult]) -> list[Finding]:
    """Every analyzer's findings, consequences folded into their causes (the module doc), ranked
    (`amqpcap.analysis.registry.rank`). The results are not changed."""
    findings = [replace(f, evidence=dict(f.evidence), subjects=list(f.subjects)) for r in results for f in r.findings]
    for rule in RULES:
        findings = _fold(findings, rule)
    return rank(findings)


def _fold(findings: list[Finding], rule: Rule) -> list[Finding]:
    causes = [f for f in findings if f.id == rule.cause]
    out = []
    for f in findings:
        if f.id != rule.consequence or not causes:
            out.append(f)
            continue
        kept, by_cause = _split_subjects(f, causes, rule)
        for cause, subjects in by_cause:
            cause.evidence.setdefault("explains", []).append(
                {"finding": f.id, "title": f.title if not kept else None, "why": rule.why,
                 "streams": sorted({int(s["stream"]) for s in subjects}), "subjects": subjects})
        if not by_cause:
            out.append(f)
        elif not kept and "explains" in f.evidence:  # what the consequence explained goes with it
            by_cause[0][0].evidence["explains"].extend(f.evidence["explains"])
        elif kept:
            f.subjects = kept
            f.evidence.setdefault("explained_in_part", []).extend(
                {"by": cause.id, "streams": sorted({int(s["stream"]) for s in subjects})}
                for cause, subjects in by_cause)
            out.append(f)
    return out


def _split_subjects(f: Finding, causes: list[Finding], rule: Rule) -> tuple[list[dict], list[tuple[Finding, list[dict]]]]:
    """(the consequence's subjects no cause explains, [(cause, the subjects it explains)])."""
    kept: list[dict] = []
    by_cause: dict[int, tuple[Finding, list[dict]]] = {}
    for s in f.subjects:
        cause = next((c for c in causes for cs in c.subjects
                      if cs.get("stream") == s.get("stream") and rule.explains(s, cs)), None)
        if cause is None:
            kept.append(s)
        else:
            by_cause.setdefault(id(cause), (cause, []))[1].append(s)
    return kept, list(by_cause.values())
