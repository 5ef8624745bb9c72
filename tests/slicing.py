"""How the fixtures' partitions are cut into slices of time in the slicing tests (test_partition,
test_replay): one place, so the tests agree and their cost stays known.

A slice step costs tens of milliseconds per analyzer whatever its size (a slice's derivations
are pandas calls on small tables), so the number of slices, not of packets, is what a test pays:
cut into slices of 50 packets, kernel-drops.pcap's 4,000 packets took 53 s in the partial test
and 58 s in the context test (measured on 2 cores), and a serial run spent over 25 minutes in
test_partition's two slicing tests. Each capture is cut twice: into 7 slices, and into at most
`FINE_SLICES` slices of at least 50 packets (a small capture's slices of 50 packets cut it inside
many consumers' and publishers' runs). Cuts before every packet are tested on the crafted
captures made for it (test_stalls, test_consumers, test_replay's crafted settles)."""

from __future__ import annotations

#: the most slices of the finer cut
FINE_SLICES = 12
#: the fewest packets of a slice of the finer cut
FINE_MIN_PACKETS = 50


def slice_sizes(packets: int) -> tuple[int, int]:
    """The two slice sizes, in packets, of a partition of `packets` packets: 7 slices, and slices of
    at least `FINE_MIN_PACKETS` packets, at most `FINE_SLICES` of them."""
    return max(1, packets // 7), max(FINE_MIN_PACKETS, -(-packets // FINE_SLICES))
