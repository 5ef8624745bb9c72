"""Secrets never leave the capture (issue 4, part 4).

fixtures/secrets.pcap was recorded from RabbitMQ (fixtures/record/record.sh, scenario
`secrets`): a dedicated user with a distinctive password logs in with PLAIN (pika) and with
AMQPLAIN (the raw client), both publish a message with a distinctive body and get it back, and
the raw client sends connection.update-secret with a distinctive new secret (RabbitMQ 3.10
answered update-secret-ok). Every CLI subcommand runs on it, with every output option and with
AMQPCAP_DEBUG=1, and every byte it writes (stdout, stderr, every file: CSV, Parquet, JSON, HTML,
PNG, and the Parquet tables read back) is searched for the password and the secret, raw, in hex
and in base64. The body may appear only with --bodies.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

import amqpcap

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "fixtures" / "secrets.pcap"
# as in fixtures/record/record.sh (and fixtures/secrets.notes.txt)
USER = "amqpcap-secret-user"
PASSWORD = "Pw-4c1f9e-amqpcap-never-in-output"
NEW_SECRET = "NewSecret-8d2b7a-amqpcap-rotated"
BODY = "BODY-6e3a91-amqpcap-distinctive-message-body"


def forms(secret: str) -> list[bytes]:
    """The secret as it could leak: raw, hex (either case), base64 at any of the three byte
    alignments it can have inside a longer encoded string (the characters that depend on the
    neighbouring bytes dropped)."""
    raw = secret.encode()
    out = [raw, raw.hex().encode(), raw.hex().upper().encode(),
           # as Wireshark shows bytes fields (amqp.sasl.initResponse: "00:67:75:...")
           raw.hex(":").encode(), raw.hex(":").upper().encode()]
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw)
        skip = (pad * 4 + 2) // 3  # characters touched by the padding bytes
        out.append(enc[skip:len(enc) - 4])  # the last group may mix in what follows
    return out


def found(data: bytes, secret: str) -> list[bytes]:
    return [f for f in forms(secret) if f in data]


def test_forms_find_what_they_should():
    # the base64 forms match the secret wherever it sits in an encoded string
    for prefix in (b"", b"x", b"xy", b"\0user\0"):
        assert found(base64.b64encode(prefix + PASSWORD.encode() + b"tail"), PASSWORD)
    assert found(PASSWORD.encode().hex().encode(), PASSWORD)
    assert found(b"initResponse: " + PASSWORD.encode().hex(":").encode(), PASSWORD)
    assert not found(base64.b64encode(b"something else entirely, long enough"), PASSWORD)


def test_the_capture_holds_the_secrets():
    """Else finding none of them in the outputs would prove nothing."""
    data = CAPTURE.read_bytes()
    assert b"\0" + USER.encode() + b"\0" + PASSWORD.encode() in data  # PLAIN response
    amqplain = b"\x05LOGINS" + len(USER).to_bytes(4, "big") + USER.encode()
    assert amqplain in data and b"\x08PASSWORDS" + len(PASSWORD).to_bytes(4, "big") + PASSWORD.encode() in data
    assert NEW_SECRET.encode() in data
    assert data.count(BODY.encode()) >= 4  # published and got back, by both clients
    cap = amqpcap.load(CAPTURE)
    counts = cap.frames["method"].value_counts()
    assert counts["connection.start-ok"] == 2 and counts["connection.update-secret"] == 1
    assert set(cap.connections["mechanism"]) == {"PLAIN", "AMQPLAIN"}
    assert set(cap.connections["user"]) == {USER}


def test_no_table_holds_a_secret_or_a_body():
    cap = amqpcap.load(CAPTURE)
    assert cap.bodies is None
    text = "\n".join([repr(cap.summary)] + [getattr(cap, t).astype(str).to_csv() for t in
                                            ("frames", "packets", "connections", "anomalies", "records")]).encode()
    for secret in (PASSWORD, NEW_SECRET, BODY):
        assert not found(text, secret), secret
    # the reason of update-secret is decoded; the secret itself is not
    assert set(cap.frames["reason"].dropna()) == {"amqpcap test rotation"}


def test_bodies_only_when_asked():
    cap = amqpcap.load(CAPTURE, bodies=True)
    b = cap.bodies
    assert len(b) == 4 and b["complete"].all()
    assert set(b["body"]) == {BODY.encode()}
    assert sorted(b["direction"].astype(str)) == ["c2s", "c2s", "s2c", "s2c"]
    # each row joins its content header in the frames table
    f = cap.frames[cap.frames["type"] == "header"]
    assert set(zip(b["stream"], b["packet"])) <= set(zip(f["stream"], f["packet"]))


def _commands(out: Path) -> list[tuple[list[str], dict]]:
    """Every subcommand (the analyzer ones and any added later included), with every output
    option; (argv, extra environment)."""
    import typer

    from amqpcap.cli import app

    group = typer.main.get_command(app)  # (the analyzers' subcommands are listed there, made when asked for)
    names = sorted(group.list_commands(typer.Context(group)))
    cap = str(CAPTURE)
    runs: list[tuple[list[str], dict]] = []
    for debug in ({}, {"AMQPCAP_DEBUG": "1"}):
        tag = "debug-" if debug else ""
        for name in names:
            if name == "sample":
                runs.append(([name], debug))
            elif name == "frames":
                runs += [([name, cap, "-o", str(out / f"{tag}frames.{fmt}")], debug) for fmt in ("csv", "parquet")]
            elif name == "verify":  # Wireshark's view (tshark's PDML), its JSON output too
                runs.append(([name, cap, "--json", str(out / f"{tag}verify.json")], debug))
            elif name == "ingest":  # the dataset: its Parquet tables and manifest.json
                runs.append(([name, cap, "--out", str(out / f"{tag}ingest")], debug))
            else:
                runs.append(([name, cap], debug))
    analyzers = [n for n in names if n not in ("sample", "frames", "info", "verify", "ingest")]
    for name in analyzers:
        for fmt in ("csv", "parquet"):
            for plots in ("--plots", "--no-plots"):
                if name != "analyze" and (fmt, plots) not in (("csv", "--plots"), ("parquet", "--no-plots")):
                    continue  # the analyzer subcommands write what analyze writes: two combinations suffice
                runs.append(([name, cap, "--out", str(out / f"{name}-{fmt}{plots}"), "--format", fmt, plots], {}))
    runs.append((["analyze", cap, "--out", str(out / "debug-analyze"), "--format", "parquet"], {"AMQPCAP_DEBUG": "1"}))
    return runs


def _run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqpcap", *argv], capture_output=True, timeout=300,
                          env={**os.environ, **env})


def _output_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root, and the text of every Parquet table read back (its pages may be
    compressed)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = p.read_bytes()
            if p.suffix == ".parquet":
                out[f"{p.relative_to(root)} (read back)"] = pd.read_parquet(p).astype(str).to_csv().encode()
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("secrets-out")
    runs = _commands(out)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda r: _run(*r), runs))
    return out, runs, results


@pytest.mark.slow
def test_every_output_is_free_of_secrets(outputs):
    out, runs, results = outputs
    assert {r[0][0] for r in runs} >= {"analyze", "frames", "info", "latency", "sizes", "consumers", "nagle", "stalls",
                                       "ingest"}
    for (argv, env), r in zip(runs, results):
        assert r.returncode == 0, (argv, r.stderr.decode()[-2000:])
        for secret in (PASSWORD, NEW_SECRET, BODY):
            assert not found(r.stdout + r.stderr, secret), (argv, env, secret)
    files = _output_bytes(out)
    kinds = {Path(n.split(" ")[0]).suffix for n in files}
    assert {".csv", ".parquet", ".json", ".html", ".png"} <= kinds
    for name, data in files.items():
        for secret in (PASSWORD, NEW_SECRET, BODY):
            assert not found(data, secret), (name, secret)
    report = (out / "analyze-csv--plots" / "report.html").read_text()
    assert "SASL responses" in report and "message bodies were not kept" in report


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_bodies_are_written_when_asked(tmp_path, fmt):
    """The same search finds the body once --bodies asks for it (and still no secret)."""
    r = _run(["analyze", str(CAPTURE), "--out", str(tmp_path), "--format", fmt, "--bodies"], {})
    assert r.returncode == 0, r.stderr.decode()
    files = _output_bytes(tmp_path)
    assert found(files[f"bodies.{fmt}"] if fmt == "csv" else files["bodies.parquet (read back)"], BODY)
    for name, data in files.items():
        if not name.startswith("bodies."):
            assert not found(data, BODY), name
        for secret in (PASSWORD, NEW_SECRET):
            assert not found(data, secret), (name, secret)
    report = (tmp_path / "report.html").read_text()
    assert "message bodies were kept on request" in report
    summary = (tmp_path / "summary.json").read_text()
    assert '"bodies_kept": true' in summary and f'"body_bytes_kept": {4 * len(BODY)}' in summary


# --- AMQP 1.0 (issue 50): the fixtures' SASL PLAIN logins --------------------------------------

#: every AMQP 1.0 fixture logs in with SASL PLAIN as guest/guest (fixtures/record/proton_client.py)
AMQP10_CAPTURES = sorted(p for p in (ROOT / "fixtures").glob("amqp10*.pcap") if "midstream" not in p.name)
AMQP10_LOGIN = "guest"
#: the PLAIN initial response (RFC 4616: authzid NUL authcid NUL passwd): the password is the
#: user name here, so it is the response, not the word, that must appear nowhere
AMQP10_RESPONSE = f"\0{AMQP10_LOGIN}\0{AMQP10_LOGIN}"


@pytest.mark.parametrize("capture", AMQP10_CAPTURES, ids=lambda p: p.name)
def test_amqp10_tables_keep_the_user_name_only(capture):
    """The capture holds the response (else finding none would prove nothing); the login name
    appears in `connections.user` and nowhere else in any table: not in `amqp10_frames`, whose
    sasl-init rows have the mechanism and nothing of the response."""
    assert AMQP10_RESPONSE.encode() in capture.read_bytes()
    cap = amqpcap.load(capture)
    assert set(cap.connections["user"]) == {AMQP10_LOGIN}
    # (amqp10.pcap's stream 0 is an AMQP 0-9-1 connection, also guest's)
    assert (cap.amqp10_frames["performative"] == "sasl-init").sum() == (cap.connections["protocol"] == "1.0").sum() > 0
    # (and AMQP 0-9-1's `frames.user`: amqp10.pcap's stream 0 logs in as guest too)
    users = [cap.connections.drop(columns=["user"]), cap.frames.drop(columns=["user"])]
    text = "\n".join([repr(cap.summary)] + [t.astype(str).to_csv() for t in users] + [
        getattr(cap, t).astype(str).to_csv() for t in ("packets", "anomalies", "records", "amqp10_frames")]).encode()
    assert not found(text, AMQP10_LOGIN)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_amqp10_analyze_outputs_hold_no_plain_response(tmp_path, fmt):
    """Every file `analyze --out` writes for an AMQP 1.0 capture (amqp10_frames among them):
    the PLAIN response (user and password) in no form."""
    capture = ROOT / "fixtures" / "amqp10.pcap"
    r = _run(["analyze", str(capture), "--out", str(tmp_path), "--format", fmt, "--no-plots"], {})
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert not found(r.stdout + r.stderr, AMQP10_RESPONSE)
    files = _output_bytes(tmp_path)
    assert f"amqp10_frames.{fmt}" in files
    for name, data in files.items():
        assert not found(data, AMQP10_RESPONSE), name


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_amqp10_frames_and_verify_outputs_hold_no_plain_response(tmp_path, fmt):
    """`frames` and `verify` (console and --json) on amqp10.pcap, whose SASL frames verify
    compares with Wireshark's (which decodes the initial response, amqp.sasl.initResponse): the
    PLAIN response in no form, while verify's output does hold the sasl-init row it compared."""
    capture = ROOT / "fixtures" / "amqp10.pcap"
    assert AMQP10_RESPONSE.encode() in capture.read_bytes()
    runs = [["frames", str(capture), "-o", str(tmp_path / f"frames.{fmt}")],
            ["verify", str(capture), "--json", str(tmp_path / f"verify-{fmt}.json")]]
    results = [_run(argv, {"AMQPCAP_DEBUG": "1"} if fmt == "parquet" else {}) for argv in runs]
    for argv, r in zip(runs, results):
        assert r.returncode == 0, (argv, r.stderr.decode()[-2000:])
        assert not found(r.stdout + r.stderr, AMQP10_RESPONSE), argv
    assert b"sasl-init mechanism=PLAIN" in results[1].stdout
    files = _output_bytes(tmp_path)
    assert set(files) >= {f"frames.{fmt}", f"verify-{fmt}.json"}
    assert b"c2s sasl-init mechanism=PLAIN" in files[f"verify-{fmt}.json"]
    for name, data in files.items():
        assert not found(data, AMQP10_RESPONSE), name
