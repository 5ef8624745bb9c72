"""The messages-per-second plot at the top of report.html, drawn from the bins the summary
prepared (`amqpcap.summary.overview.rate_bins`)."""

from __future__ import annotations

import numpy as np

from ..model.plotting import agg_pyplot, plain_axis


def rates_png(bins: tuple[np.ndarray, dict[str, np.ndarray]] | None) -> bytes | None:
    """A small plot for the top of the report: messages published, delivered and acked per second
    over the capture (per time bin: `amqpcap.summary.overview.rate_bins`), and published minus
    delivered so far (what went in and has not come out: a queue growing shows as a rising line).
    None without bins."""
    if bins is None:
        return None
    edges, counts = bins
    width = edges[1] - edges[0]
    import io

    plt = agg_pyplot()
    fig, ax = plt.subplots(figsize=(11, 2.6), layout="constrained")
    for (k, n), color in zip(counts.items(), ("C0", "C1", "C2")):
        ax.step(edges[:-1], n / width, where="post", color=color, lw=1.2, label=f"{k} msg/s")
    plain_axis(ax.yaxis)
    ax.set_ylabel("msg/s")
    ax.set_xlabel(f"seconds since capture start ({width * 1e3:.0f} ms bins)")
    ax.set_xlim(edges[0], edges[-1])
    ax.grid(alpha=0.3)
    gap = ax.twinx()
    gap.plot(edges[1:], np.cumsum(counts["published"] - counts["delivered"]), color="black", ls="--", lw=1.2,
             label="published − delivered so far (msgs)")
    gap.set_ylabel("msgs", fontsize=8)
    plain_axis(gap.yaxis)
    lines = ax.get_legend_handles_labels()[0] + gap.get_legend_handles_labels()[0]
    ax.legend(handles=lines, fontsize=8, loc="upper left", ncols=4)
    # a start-up burst (a publisher flushing what it queued while connecting) would squash the
    # steady rates into the axis: the scale follows the 95th percentile of the busy bins, the
    # burst is cut and its peak written
    rates = np.concatenate([n / width for n in counts.values()])
    steady = np.percentile(rates[rates > 0], 95) * 1.6 if (rates > 0).any() else 1.0
    top = rates.max() if rates.max() <= steady * 1.5 else steady
    if top < rates.max():
        ax.annotate(f"peak {rates.max():,.0f} msg/s (cut)", (edges[np.argmax(np.max([n for n in counts.values()], 0))], top),
                    xytext=(4, -10), textcoords="offset points", fontsize=7, color="dimgrey")
    ax.set_ylim(0, max(top, 1.0) * 1.3)  # room for the legend
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
