//! Link, IP and TCP header decoding of one captured packet (etherparse does IP and TCP).
//!
//! Link types (tcpdump.org/linktypes.html): Ethernet with 802.1Q tags, Linux cooked SLL and
//! SLL2 (`tcpdump -i any`), BSD NULL/LOOP, raw IP.

use etherparse::{Ethernet2HeaderSlice, IpNumber, Ipv4HeaderSlice, Ipv6ExtensionsSlice, Ipv6HeaderSlice, SingleVlanHeaderSlice, TcpHeaderSlice};

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

/// What follows the link header.
enum Network<'a> {
    EtherType(u16, &'a [u8]),
    /// IPv4 or IPv6, told apart by the version nibble.
    Ip(&'a [u8]),
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;

fn link_layer(linktype: u32, data: &[u8]) -> Result<Network<'_>, LinkError> {
    Ok(match linktype {
        LINKTYPE_ETHERNET => {
            let eth = Ethernet2HeaderSlice::from_slice(data).map_err(|_| LinkError::Malformed)?;
            let mut ether_type = eth.ether_type().0;
            let mut rest = &data[eth.slice().len()..];
            // 802.1Q / 802.1ad tags (at most two, as in QinQ)
            for _ in 0..2 {
                if ether_type != ETHERTYPE_VLAN && ether_type != ETHERTYPE_QINQ {
                    break;
                }
                let vlan = SingleVlanHeaderSlice::from_slice(rest).map_err(|_| LinkError::Malformed)?;
                ether_type = vlan.ether_type().0;
                rest = &rest[vlan.slice().len()..];
            }
            Network::EtherType(ether_type, rest)
        }
        LINKTYPE_RAW | LINKTYPE_RAW_BSD12 | LINKTYPE_RAW_BSD14 | LINKTYPE_IPV4 | LINKTYPE_IPV6 => Network::Ip(data),
        LINKTYPE_LINUX_SLL => {
            // pkttype(2) hatype(2) halen(2) addr(8) protocol(2)
            let proto = data.get(14..16).ok_or(LinkError::Malformed)?;
            Network::EtherType(u16::from_be_bytes([proto[0], proto[1]]), &data[16..])
        }
        LINKTYPE_LINUX_SLL2 => {
            // protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
            let proto = data.get(0..2).ok_or(LinkError::Malformed)?;
            Network::EtherType(u16::from_be_bytes([proto[0], proto[1]]), data.get(20..).ok_or(LinkError::Malformed)?)
        }
        // A 4-byte address family, host byte order for NULL, network order for LOOP. Only IPv4
        // and IPv6 follow, so the IP version nibble decides.
        LINKTYPE_NULL | LINKTYPE_LOOP => Network::Ip(data.get(4..).ok_or(LinkError::Malformed)?),
        _ => return Err(LinkError::NotTcp),
    })
}

/// IP layer: addresses, the TCP bytes the capture holds, and the TCP length the IP header declares.
struct IpPart<'a> {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    tcp: &'a [u8],
    tcp_declared_len: usize,
}

fn ipv4(l3: &[u8]) -> Result<IpPart<'_>, LinkError> {
    let h = Ipv4HeaderSlice::from_slice(l3).map_err(|_| LinkError::Malformed)?;
    if h.protocol() != IpNumber::TCP {
        return Err(LinkError::NotTcp);
    }
    if h.is_fragmenting_payload() {
        return Err(LinkError::Fragment);
    }
    let hl = h.slice().len();
    let total = h.total_len() as usize;
    if total != 0 && total < hl {
        // A length shorter than the header itself (Wireshark: "bogus IP length").
        return Err(LinkError::Malformed);
    }
    // Ethernet pads short frames: the IP length bounds the payload. A zero total length
    // (TSO on the sending host) means "as captured".
    let end = if total >= hl { total.min(l3.len()) } else { l3.len() };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src[..4].copy_from_slice(&h.source());
    dst[..4].copy_from_slice(&h.destination());
    let declared = if total >= hl { total - hl } else { l3.len() - hl };
    Ok(IpPart { v6: false, src, dst, tcp: &l3[hl..end.max(hl)], tcp_declared_len: declared })
}

fn ipv6(l3: &[u8]) -> Result<IpPart<'_>, LinkError> {
    let h = Ipv6HeaderSlice::from_slice(l3).map_err(|_| LinkError::Malformed)?;
    let payload_len = h.payload_length() as usize;
    let avail = &l3[40..(40 + payload_len).min(l3.len())];
    let (exts, next, rest) = Ipv6ExtensionsSlice::from_slice(h.next_header(), avail).map_err(|_| LinkError::Malformed)?;
    if next != IpNumber::TCP {
        return Err(LinkError::NotTcp);
    }
    if exts.is_fragmenting_payload() {
        return Err(LinkError::Fragment);
    }
    let ext_len = avail.len() - rest.len();
    Ok(IpPart { v6: true, src: h.source(), dst: h.destination(), tcp: rest, tcp_declared_len: payload_len.saturating_sub(ext_len) })
}

pub fn decode(linktype: u32, data: &[u8]) -> Result<TcpPacket<'_>, LinkError> {
    let ip = match link_layer(linktype, data)? {
        Network::EtherType(ETHERTYPE_IPV4, l3) => ipv4(l3)?,
        Network::EtherType(ETHERTYPE_IPV6, l3) => ipv6(l3)?,
        Network::EtherType(_, _) => return Err(LinkError::NotTcp),
        Network::Ip(l3) => match l3.first().map(|b| b >> 4) {
            Some(4) => ipv4(l3)?,
            Some(6) => ipv6(l3)?,
            _ => return Err(LinkError::Malformed),
        },
    };
    let b = ip.tcp;
    // Data offset: the header length the packet claims (RFC 9293 §3.1).
    let full_header = b.get(12).map_or(0, |&x| (x >> 4) as usize * 4);
    let header_len = match TcpHeaderSlice::from_slice(b) {
        Ok(tcp) => tcp.slice().len(),
        // The capture's snaplen cut the TCP options (tcpdump -s 68 and a SYN's 20 bytes of
        // options): the fixed header is there, the payload is all missing. Wireshark shows
        // these packets too, as "packet size limited during capture".
        Err(_)
            if b.len() >= 20
                && full_header >= 20
                && b.len() < full_header
                && ip.tcp_declared_len >= full_header =>
        {
            b.len()
        }
        Err(_) => return Err(LinkError::Malformed),
    };
    let payload = &b[header_len..];
    // The IP length says how much payload the packet had, even when snaplen cut it.
    let payload_len = ip
        .tcp_declared_len
        .saturating_sub(full_header)
        .max(payload.len());
    let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    // Flags as Wireshark's tcp.flags: the NS/AE bit sits in the low bit of byte 12.
    let flags = ((b[12] as u16 & 1) << 8) | b[13] as u16;
    Ok(TcpPacket {
        v6: ip.v6,
        src: ip.src,
        dst: ip.dst,
        sport: be16(0),
        dport: be16(2),
        seq: be32(4),
        ack: be32(8),
        flags,
        window: be16(14),
        options: &b[20..header_len],
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
