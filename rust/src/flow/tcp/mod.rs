//! TCP: conversation keys and per-direction reassembly.
pub mod reassembly;

/// An address/port pair; IPv4 addresses use the first 4 octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: [u8; 16],
    pub port: u16,
}

/// Both endpoints in canonical order, so that either direction finds the conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvKey {
    pub lo: Endpoint,
    pub hi: Endpoint,
    pub v6: bool,
}

impl ConvKey {
    pub fn new(src: Endpoint, dst: Endpoint, v6: bool) -> Self {
        if src <= dst {
            ConvKey { lo: src, hi: dst, v6 }
        } else {
            ConvKey { lo: dst, hi: src, v6 }
        }
    }
}

pub fn format_addr(addr: &[u8; 16], v6: bool) -> String {
    if v6 {
        std::net::Ipv6Addr::from(*addr).to_string()
    } else {
        std::net::Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string()
    }
}
