//! Link, IP and TCP header decoding of one captured packet (etherparse does IP and TCP).
//!
//! Link types (tcpdump.org/linktypes.html): Ethernet with 802.1Q tags, Linux cooked SLL and
//! SLL2 (`tcpdump -i any`), BSD NULL/LOOP, raw IP.

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW_BSD12: u32 = 12;
pub const LINKTYPE_RAW_BSD14: u32 = 14;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

pub fn linktype_supported(linktype: u32) -> bool {
    matches!(
        linktype,
        LINKTYPE_NULL
            | LINKTYPE_ETHERNET
            | LINKTYPE_RAW_BSD12
            | LINKTYPE_RAW_BSD14
            | LINKTYPE_RAW
            | LINKTYPE_LOOP
            | LINKTYPE_LINUX_SLL
            | LINKTYPE_IPV4
            | LINKTYPE_IPV6
            | LINKTYPE_LINUX_SLL2
    )
}

pub fn linktype_name(linktype: u32) -> String {
    match linktype {
        LINKTYPE_NULL => "NULL".into(),
        LINKTYPE_ETHERNET => "EN10MB".into(),
        LINKTYPE_RAW | LINKTYPE_RAW_BSD12 | LINKTYPE_RAW_BSD14 => "RAW".into(),
        LINKTYPE_LOOP => "LOOP".into(),
        LINKTYPE_LINUX_SLL => "LINUX_SLL".into(),
        LINKTYPE_IPV4 => "IPV4".into(),
        LINKTYPE_IPV6 => "IPV6".into(),
        LINKTYPE_LINUX_SLL2 => "LINUX_SLL2".into(),
        other => format!("LINKTYPE_{other}"),
    }
}

/// Addresses are IPv6-sized; IPv4 ones are stored in the first 4 octets (`v6 == false`).
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<'a> {
    pub v6: bool,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    /// Flags as Wireshark's tcp.flags (FIN 0x01 … CWR 0x80, AE/NS 0x100).
    pub flags: u16,
    pub window: u16,
    pub options: &'a [u8],
    /// Payload bytes the capture holds.
    pub payload: &'a [u8],
    /// Payload length according to the IP and TCP headers.
    pub payload_len: u32,
}

pub const FIN: u16 = 0x01;
pub const SYN: u16 = 0x02;
pub const RST: u16 = 0x04;
pub const ACK: u16 = 0x10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// Not TCP over IP (ARP, UDP, ...): silently ignored.
    NotTcp,
    /// Headers that do not parse.
    Malformed,
    /// A fragment of a fragmented IP packet.
    Fragment,
}

pub fn decode(linktype: u32, data: &[u8]) -> Result<TcpPacket<'_>, LinkError> {
    let sliced = match linktype {
        LINKTYPE_ETHERNET => LaxSlicedPacket::from_ethernet(data).map_err(|_| LinkError::Malformed)?,
        LINKTYPE_RAW | LINKTYPE_RAW_BSD12 | LINKTYPE_RAW_BSD14 | LINKTYPE_IPV4 | LINKTYPE_IPV6 => {
            LaxSlicedPacket::from_ip(data).map_err(|_| LinkError::Malformed)?
        }
        LINKTYPE_LINUX_SLL => {
            // pkttype(2) hatype(2) halen(2) addr(8) protocol(2)
            let proto = data.get(14..16).ok_or(LinkError::Malformed)?;
            LaxSlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([proto[0], proto[1]])), &data[16..])
        }
        LINKTYPE_LINUX_SLL2 => {
            // protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
            let proto = data.get(0..2).ok_or(LinkError::Malformed)?;
            let rest = data.get(20..).ok_or(LinkError::Malformed)?;
            LaxSlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([proto[0], proto[1]])), rest)
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            // A 4-byte address family, host byte order for NULL, network order for LOOP. Only
            // IPv4 and IPv6 follow, so the IP version nibble decides.
            let rest = data.get(4..).ok_or(LinkError::Malformed)?;
            LaxSlicedPacket::from_ip(rest).map_err(|_| LinkError::Malformed)?
        }
        _ => return Err(LinkError::NotTcp),
    };
    let (v6, src, dst, ip_start, ip_declared_end) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(ip)) => {
            let h = ip.header();
            if ip.is_payload_fragmented() {
                return Err(LinkError::Fragment);
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s[..4].copy_from_slice(&h.source());
            d[..4].copy_from_slice(&h.destination());
            let start = h.slice().as_ptr() as usize - data.as_ptr() as usize;
            (false, s, d, start, start + h.total_len() as usize)
        }
        Some(LaxNetSlice::Ipv6(ip)) => {
            let h = ip.header();
            if ip.is_payload_fragmented() {
                return Err(LinkError::Fragment);
            }
            let start = h.slice().as_ptr() as usize - data.as_ptr() as usize;
            (true, h.source(), h.destination(), start, start + 40 + h.payload_length() as usize)
        }
        _ => return Err(LinkError::NotTcp),
    };
    let tcp = match sliced.transport {
        Some(TransportSlice::Tcp(t)) => t,
        _ => {
            let is_tcp = sliced.net.as_ref().and_then(|n| n.ip_payload_ref()).is_some_and(|p| p.ip_number == etherparse::IpNumber::TCP);
            return Err(if is_tcp { LinkError::Malformed } else { LinkError::NotTcp });
        }
    };
    let payload = tcp.payload();
    let payload_start = payload.as_ptr() as usize - data.as_ptr() as usize;
    // The IP length says how much payload the packet had, even when snaplen cut it. A zero
    // IPv4 total length (TSO on the sending host) means "as captured".
    let payload_len = if ip_declared_end > ip_start + 20 || v6 {
        ip_declared_end.saturating_sub(payload_start).max(payload.len())
    } else {
        payload.len()
    };
    let mut flags = 0u16;
    for (bit, set) in [
        (0x01, tcp.fin()),
        (0x02, tcp.syn()),
        (0x04, tcp.rst()),
        (0x08, tcp.psh()),
        (0x10, tcp.ack()),
        (0x20, tcp.urg()),
        (0x40, tcp.ece()),
        (0x80, tcp.cwr()),
        (0x100, tcp.ns()),
    ] {
        if set {
            flags |= bit;
        }
    }
    Ok(TcpPacket {
        v6,
        src,
        dst,
        sport: tcp.source_port(),
        dport: tcp.destination_port(),
        seq: tcp.sequence_number(),
        ack: tcp.acknowledgment_number(),
        flags,
        window: tcp.window_size(),
        options: &tcp.header_slice()[20..],
        payload,
        payload_len: payload_len as u32,
    })
}

/// TCP options we keep (RFC 9293 §3.1, RFC 7323, RFC 2018).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub timestamp: Option<(u32, u32)>,
    pub sack_blocks: u8,
}

/// Walk the option bytes by hand: a malformed option ends the walk, it never fails the packet.
pub fn parse_options(opts: &[u8]) -> TcpOptions {
    let mut o = TcpOptions::default();
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { break };
                let len = len as usize;
                if len < 2 || i + len > opts.len() {
                    break;
                }
                let v = &opts[i + 2..i + len];
                match (kind, len) {
                    (2, 4) => o.mss = Some(u16::from_be_bytes([v[0], v[1]])),
                    (3, 3) => o.window_scale = Some(v[0].min(14)),
                    (5, _) => o.sack_blocks = ((len - 2) / 8) as u8,
                    (8, 10) => {
                        o.timestamp = Some((
                            u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
                            u32::from_be_bytes([v[4], v[5], v[6], v[7]]),
                        ))
                    }
                    _ => {}
                }
                i += len;
            }
        }
    }
    o
}
