"""Wireshark's decoding of a capture, packet by packet: tshark's JSON or PDML output, read as it
streams.

`amqpcap verify` compares amqpcap with Wireshark's AMQP dissector. It runs tshark itself and
waits for it with `subprocess`. An earlier version went through pyshark, whose asyncio child
watcher could lose tshark's exit status (reported as a crash, exit 255) when other child
processes of the same Python process were started and reaped around it.

A packet is the list of its protocol layers (`Layer`), in order: a packet with three AMQP frames
has three ``amqp`` layers. A layer holds every field inside it, nested ones too, by name, in
the order tshark printed them. JSON is the cheaper to read (about a tenth of PDML's parsing time
here) but has no shown names; PDML has them ("Mechanisms (sym32): PLAIN").
"""

from __future__ import annotations

import codecs
import json
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal, NamedTuple

from ..model.errors import ToolError

#: bytes read from tshark at a time when its JSON output is cut into packets
_JSON_CHUNK_BYTES = 1 << 20


class Field(NamedTuple):
    """One occurrence of a field: ``show`` is its value as tshark prints it, ``showname`` the
    line Wireshark's packet tree shows ("Type: Method (1)"; PDML only, else empty)."""

    show: str
    showname: str = ""

    @property
    def shown_value(self) -> str:
        """The part of ``showname`` after its label ("Mechanisms (sym32): PLAIN" -> "PLAIN"),
        else ``show``."""
        _, sep, value = self.showname.partition(": ")
        return value if sep and value else self.show


@dataclass
class Layer:
    """One protocol layer of a packet: its name and every field in it."""

    name: str
    fields: dict[str, list[Field]] = field(default_factory=dict)

    def show(self, name: str) -> str | None:
        """The value of the first occurrence of field ``name``, None when the layer has none."""
        found = self.fields.get(name)
        return found[0].show if found else None

    def all(self, name: str) -> list[Field]:
        return self.fields.get(name, [])


def tshark_path(needed_for: str) -> str:
    """Where tshark is, or a ToolError saying that ``needed_for`` ("amqpcap verify") needs it."""
    tshark = shutil.which("tshark")
    if tshark is None:
        raise ToolError(f"{needed_for} needs tshark (Wireshark's command line; Debian/Ubuntu: apt-get install tshark)")
    return tshark


def tshark_messages(stderr: str) -> list[str]:
    """tshark's messages in ``stderr``, without its warning about running as root."""
    return [l.strip() for l in stderr.splitlines() if l.strip() and "Running as user" not in l]


def tshark_command(path: str, *, output: Literal["json", "pdml"], display_filter: str, protocols: str,
                   whole_layers: bool, decode_as: dict[str, str], prefs: dict[str, str]) -> list[str]:
    """The tshark command printing the packets of ``path`` that match ``display_filter``, with
    only the layers named in ``protocols``: each with all its fields (``whole_layers``, tshark's
    -J) or only its top-level ones (-j)."""
    cmd = [tshark_path("amqpcap verify"), "-n", "-r", path, "-Y", display_filter, "-T", output,
           "-J" if whole_layers else "-j", protocols]
    if output == "json":
        cmd.append("--no-duplicate-keys")  # a packet's several amqp layers as one list
    for selector, proto in decode_as.items():
        cmd += ["-d", f"{selector},{proto}"]
    for name, value in prefs.items():
        cmd += ["-o", f"{name}:{value}"]
    return cmd


def packets(cmd: list[str], path: str) -> Iterator[list[Layer]]:
    """Run ``cmd`` (`tshark_command`) and yield its packets as they are printed. A tshark that
    fails raises ToolError naming ``path`` and tshark's message, once its output is read."""
    read = _json_packets if cmd[cmd.index("-T") + 1] == "json" else _pdml_packets
    # stderr goes to a file: a pipe left unread could fill and stall tshark
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        finished, unreadable = False, None
        try:
            yield from read(proc.stdout)
            finished = True
        except (ET.ParseError, ValueError) as e:  # json.JSONDecodeError is a ValueError
            finished, unreadable = True, e  # tshark stopped mid-document: its exit status says why
        finally:
            if not finished:  # the reader stopped early
                proc.kill()
            proc.stdout.close()
            status = proc.wait()
        if status != 0:
            err.seek(0)
            lines = tshark_messages(err.read().decode(errors="replace"))
            raise ToolError(f"tshark failed on {path} (exit status {status}): {lines[-1] if lines else 'no message'}")
        if unreadable is not None:
            raise ToolError(f"tshark's output for {path} could not be read: {unreadable}")


# --- PDML: <packet><proto name=...><field name=... show=... showname=...> ------------------------

def _pdml_packets(stream: IO[bytes]) -> Iterator[list[Layer]]:
    for _, elem in ET.iterparse(stream, events=("end",)):
        if elem.tag == "packet":
            yield [_pdml_layer(p) for p in elem.findall("proto")]
            elem.clear()


def _pdml_layer(proto: ET.Element) -> Layer:
    layer = Layer(proto.get("name", ""))
    for f in proto.iter("field"):
        name = f.get("name")
        if name:
            layer.fields.setdefault(name, []).append(Field(f.get("show", ""), f.get("showname", "")))
    return layer


# --- JSON: [{"_source": {"layers": {"tcp": {...}, "amqp": [{...}, {...}]}}}, ...] ------------------

def _json_packets(stream: IO[bytes]) -> Iterator[list[Layer]]:
    """The packets of tshark's JSON array, decoded one by one as the bytes arrive."""
    decoder, text = json.JSONDecoder(), codecs.getincrementaldecoder("utf-8")()
    buf, pos, eof = "", 0, False
    while True:
        # past the array's opening bracket, the commas between packets and whitespace
        while pos < len(buf) and buf[pos] in "[, \t\r\n":
            pos += 1
        if pos < len(buf) and buf[pos] == "]":
            return
        try:
            if pos == len(buf):
                raise ValueError("need more")
            packet, end = decoder.raw_decode(buf, pos)
        except ValueError:
            if eof:
                if buf[pos:].strip():
                    raise
                return
            chunk = stream.read(_JSON_CHUNK_BYTES)
            eof = not chunk
            buf = buf[pos:] + text.decode(chunk, final=eof)
            pos = 0
            continue
        pos = end
        yield _json_layers(packet["_source"]["layers"])


def _json_layers(layers: dict[str, Any]) -> list[Layer]:
    out = []
    for name, value in layers.items():
        for one in value if isinstance(value, list) else [value]:
            layer = Layer(name)
            if isinstance(one, dict):
                _json_fields(one, layer.fields)
            out.append(layer)
    return out


def _json_fields(node: dict[str, Any], into: dict[str, list[Field]]) -> None:
    """Every field under ``node``: a subtree ("tcp.flags_tree": {...}) is walked into."""
    for name, value in node.items():
        for one in value if isinstance(value, list) else [value]:
            if isinstance(one, dict):
                _json_fields(one, into)
            else:
                into.setdefault(name, []).append(Field(str(one)))
