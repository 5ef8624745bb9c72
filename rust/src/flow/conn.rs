//! The conversations (Wireshark's tcp.stream): what the pipeline keeps per connection and per
//! direction while the capture is read — which side is the client and how sure that is, the
//! direction's reassembler and decoder, the handshake facts — in chunks that a million
//! conversations can grow into without copying.

use crate::proto::dispatch::StreamDecoder;
use crate::proto::facts::ConnInfo;
use crate::capture::link::TcpOptions;
use crate::flow::tcp::reassembly::Reassembler;
use crate::flow::tcp::Endpoint;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// No payload yet and no AMQP port: may still turn out to be AMQP (protocol header).
    Undecided,
    Amqp,
    Other,
}

/// How sure we are which side is the client (higher wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ClientEvidence {
    FirstPacket,
    Syn,
    Port,
    ProtocolHeader,
}

/// Per-direction state. Kept small: a capture may hold a million conversations (the decoder is
/// allocated only for directions that carry AMQP bytes).
#[derive(Default)]
pub(crate) struct Dir {
    /// Wireshark's base for relative sequence numbers.
    pub(crate) base_seq: Option<u32>,
    pub(crate) syn_options: Option<TcpOptions>,
    pub(crate) reasm: Reassembler,
    pub(crate) decoder: Option<Box<StreamDecoder>>,
    pub(crate) packets: u64,
    pub(crate) payload_bytes: u64,
    /// The decoder's byte counts, kept when it is dropped at the end of the capture.
    pub(crate) bytes_decoded: u64,
    pub(crate) bytes_skipped: u64,
    /// The decoder found TLS where AMQP should be (kept when it is dropped, like the counts).
    pub(crate) encrypted: bool,
}

impl Dir {
    /// The earliest packet a frame row still to come from bytes this direction already holds
    /// may be attributed to (None: every frame still to come is of a later packet). Segments
    /// held out of order come out, when their holes are given up, as of their own packet or
    /// the direction's latest one, whichever is later (`Reassembler::flush_ooo`).
    pub(crate) fn earliest_pending_frame(&self) -> Option<u32> {
        let last = self.reasm.last_arrival().map_or(0, |p| p.number);
        let held = self.reasm.earliest_held_packet().map(|p| if last > 0 { p.min(last) } else { p });
        let undecoded = self.decoder.as_ref().and_then(|d| d.earliest_pending_frame(last));
        held.into_iter().chain(undecoded).min()
    }
}

pub(crate) struct Stream {
    /// Decoded from plaintext that tshark decrypted with a TLS key log (see [`Decrypted`]),
    /// not from the TCP payload.
    pub(crate) decrypted: bool,
    pub(crate) a: Endpoint,
    pub(crate) b: Endpoint,
    pub(crate) v6: bool,
    pub(crate) kind: Kind,
    pub(crate) a_is_client: bool,
    pub(crate) evidence: ClientEvidence,
    pub(crate) dirs: [Dir; 2],
    pub(crate) first_ts: i64,
    pub(crate) last_ts: i64,
    pub(crate) info: ConnInfo,
}

impl Stream {
    /// Whether the client side is settled for good. Evidence only grows (`ClientEvidence`):
    /// past the port, only a protocol header can change it, and only as a direction's first
    /// bytes (`crate::pipeline`); a decrypted stream's is seen in its plaintext, so it waits for
    /// that header or the end.
    pub(crate) fn client_settled(&self) -> bool {
        self.evidence == ClientEvidence::ProtocolHeader
            || (self.evidence == ClientEvidence::Port && !self.decrypted && self.dirs.iter().all(|d| d.reasm.span() > 0))
    }
}

/// The conversations, in chunks: no reallocation copies them all as they grow (a million
/// of them are hundreds of MB), and the connections table frees each chunk once it is read.
#[derive(Default)]
pub(crate) struct Streams {
    pub(crate) chunks: Vec<Vec<Stream>>,
    pub(crate) len: usize,
}

pub(crate) const STREAM_CHUNK: usize = 1 << 14;

impl Streams {
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn push(&mut self, s: Stream) {
        if self.chunks.last().is_none_or(|c| c.len() == STREAM_CHUNK) {
            self.chunks.push(Vec::with_capacity(STREAM_CHUNK));
        }
        self.chunks.last_mut().unwrap().push(s);
        self.len += 1;
    }
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Stream> {
        self.chunks.iter().flatten()
    }
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Stream> {
        self.chunks.iter_mut().flatten()
    }
}

impl std::ops::Index<usize> for Streams {
    type Output = Stream;
    fn index(&self, i: usize) -> &Stream {
        &self.chunks[i / STREAM_CHUNK][i % STREAM_CHUNK]
    }
}

impl std::ops::IndexMut<usize> for Streams {
    fn index_mut(&mut self, i: usize) -> &mut Stream {
        &mut self.chunks[i / STREAM_CHUNK][i % STREAM_CHUNK]
    }
}
