//! Partitions of connections: which bucket a conversation belongs to, and the subset of
//! buckets one decoding pass keeps. `amqpcap ingest` decodes a large capture in passes, each
//! keeping whole connections of some buckets, so that a pass holds only its share of the rows
//! (docs/dataset.md, "Buckets and passes").

/// The bucket of stream number `stream` among `buckets`: Fibonacci hashing (the golden-ratio
/// multiplier, top 32 bits), so that a run of consecutive streams (a burst of short
/// connections) spreads over the buckets instead of filling them in turn. The one definition:
/// Python's `amqpcap.dataset.bucket_of` calls it.
pub fn bucket_of(stream: u32, buckets: u32) -> u32 {
    let h = (stream as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (h % buckets.max(1) as u64) as u32
}

/// What one decoding pass keeps: the connections of the `kept` buckets (out of `buckets`),
/// and, when `capture_rows`, the rows of no connection (the `records` table, anomalies of the
/// file). Conversations of other buckets are still followed far enough to number streams
/// exactly as a whole decode does (Wireshark's tcp.stream, port reuse), nothing more.
#[derive(Debug, Clone)]
pub struct Partition {
    pub buckets: u32,
    kept: Vec<bool>,
    pub capture_rows: bool,
}

impl Partition {
    pub fn new(buckets: u32, kept: &[u32], capture_rows: bool) -> Result<Self, String> {
        if buckets == 0 {
            return Err("a partition needs at least one bucket".into());
        }
        let mut mask = vec![false; buckets as usize];
        for &k in kept {
            *mask.get_mut(k as usize).ok_or_else(|| format!("bucket {k} is not below {buckets}"))? = true;
        }
        Ok(Partition { buckets, kept: mask, capture_rows })
    }

    pub fn keeps(&self, stream: u32) -> bool {
        self.kept[bucket_of(stream, self.buckets) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_streams_spread_over_the_buckets() {
        let per: Vec<usize> = (0..4).map(|k| (0..400u32).filter(|&s| bucket_of(s, 4) == k).count()).collect();
        assert!(per.iter().all(|&n| (80..=120).contains(&n)), "{per:?}");
    }

    #[test]
    fn a_partition_keeps_the_streams_of_its_buckets() {
        let p = Partition::new(3, &[0, 2], false).unwrap();
        for s in 0..100 {
            assert_eq!(p.keeps(s), bucket_of(s, 3) != 1);
        }
        assert!(Partition::new(3, &[3], true).is_err());
        assert!(Partition::new(0, &[], true).is_err());
    }
}
