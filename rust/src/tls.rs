//! TLS connections decrypted outside the core: their plaintext, handed in per packet.

/// Plaintext of TLS connections decrypted outside the core (tshark with a key log): for each
/// packet, the application data of the TLS records that packet completed (tshark attributes a
/// record spanning several segments to the segment that ends it). The streams listed are decoded
/// from these bytes — already reassembled and in order — instead of their TCP payload; their
/// packets still go through TCP reassembly, so the `packets` table and capture gaps describe
/// the real (encrypted) segments.
#[derive(Default)]
pub struct Decrypted {
    streams: ahash::AHashSet<u32>,
    /// Ascending frame numbers, and the end of each one's plaintext in `data`.
    packets: Vec<u32>,
    ends: Vec<usize>,
    data: Vec<u8>,
    next: usize,
}

impl Decrypted {
    pub fn new(streams: Vec<u32>, packets: Vec<u32>, ends: Vec<u64>, data: Vec<u8>) -> Result<Self, String> {
        if packets.len() != ends.len() {
            return Err("decrypted: packets and ends differ in length".into());
        }
        if packets.windows(2).any(|w| w[0] >= w[1]) {
            return Err("decrypted: packet numbers must be strictly ascending".into());
        }
        if ends.windows(2).any(|w| w[0] > w[1]) || ends.last().is_some_and(|&e| e as usize > data.len()) {
            return Err("decrypted: ends must ascend within the data".into());
        }
        let ends = ends.into_iter().map(|e| e as usize).collect();
        Ok(Decrypted { streams: streams.into_iter().collect(), packets, ends, data, next: 0 })
    }

    /// Whether `stream` is decoded from decrypted plaintext.
    pub(crate) fn decodes(&self, stream: u32) -> bool {
        self.streams.contains(&stream)
    }

    /// The plaintext completed by frame `number` (frames come in ascending order).
    pub(crate) fn take(&mut self, number: u32) -> Option<&[u8]> {
        while self.next < self.packets.len() && self.packets[self.next] < number {
            self.next += 1;
        }
        if self.packets.get(self.next) != Some(&number) {
            return None;
        }
        let start = if self.next == 0 { 0 } else { self.ends[self.next - 1] };
        let end = self.ends[self.next];
        self.next += 1;
        Some(&self.data[start..end])
    }
}
