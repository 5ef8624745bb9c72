"""`amqpcap sample`: the path of the sample capture shipped with amqpcap."""

from __future__ import annotations

from ..io.sample import sample_path
from .app import app
from .consoles import out


@app.command()
def sample() -> None:
    """Print the path of the sample capture shipped with amqpcap."""
    out.print(sample_path(), highlight=False, soft_wrap=True)
