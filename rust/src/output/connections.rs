//! The `connections` table (docs/tables.md): one row per AMQP connection, made from the
//! conversations (`crate::flow`) once the capture has been read.

use crate::output::tables::{Column, StrCol, Table,
};
use crate::flow::tcp::{format_addr, Endpoint};
use crate::flow::conn::{Dir, Kind, Stream, Streams};
use crate::proto::facts::Handshake;

/// One pass over the conversations fills every column (a million conversations make one
/// column per pass far slower: each pass walks all the stream structs again); each chunk of
/// conversations is freed once read.
/// One row per AMQP conversation whose stream number `keep` accepts.
pub(crate) fn connections_table(streams: Streams, keep: impl Fn(usize) -> bool) -> Table {
    {
        enum Get {
            I32(fn(usize, &Stream) -> i32),
            I64(fn(&Stream) -> i64),
            Ts(fn(&Stream) -> i64),
            Bool(fn(&Stream) -> bool),
            Opt(fn(&Stream) -> Option<u64>),
            Text(fn(&Stream) -> Option<String>),
        }
        #[allow(clippy::large_enum_variant)] // one of each per column, not per row
        enum Build {
            I32(Vec<i32>),
            I64(Vec<i64>),
            Ts(Vec<i64>),
            Bool(Vec<bool>),
            Opt(Vec<i64>, Vec<bool>),
            Text(StrCol),
        }
        fn client(s: &Stream) -> &Dir {
            &s.dirs[if s.a_is_client { 0 } else { 1 }]
        }
        fn broker(s: &Stream) -> &Dir {
            &s.dirs[if s.a_is_client { 1 } else { 0 }]
        }
        fn ep(s: &Stream, client_side: bool) -> Endpoint {
            if s.a_is_client == client_side {
                s.a
            } else {
                s.b
            }
        }
        /// The index of the client's (`client_side`) or the broker's facts in an array by
        /// endpoint (0: sent by A).
        fn side(s: &Stream, client_side: bool) -> usize {
            if s.a_is_client == client_side {
                0
            } else {
                1
            }
        }
        fn hs<T>(s: &Stream, f: impl Fn(&Handshake) -> Option<T>) -> Option<T> {
            s.info.hs.as_deref().and_then(f)
        }
        let spec: Vec<(&'static str, Get)> = vec![
            ("stream", Get::I32(|i, _| i as i32)),
            ("client_addr", Get::Text(|s| Some(format_addr(&ep(s, true).addr, s.v6)))),
            ("client_port", Get::I64(|s| ep(s, true).port as i64)),
            ("broker_addr", Get::Text(|s| Some(format_addr(&ep(s, false).addr, s.v6)))),
            ("broker_port", Get::I64(|s| ep(s, false).port as i64)),
            ("first_ts", Get::Ts(|s| s.first_ts)),
            ("last_ts", Get::Ts(|s| s.last_ts)),
            ("c2s_packets", Get::I64(|s| client(s).packets as i64)),
            ("s2c_packets", Get::I64(|s| broker(s).packets as i64)),
            ("c2s_bytes", Get::I64(|s| client(s).payload_bytes as i64)),
            ("s2c_bytes", Get::I64(|s| broker(s).payload_bytes as i64)),
            ("handshake_seen", Get::Bool(|s| client(s).reasm.syn_seen)),
            ("protocol_header_seen", Get::Bool(|s| s.info.protocol_header_seen)),
            ("protocol", Get::Text(|s| s.info.protocol.map(|p| p.name().to_string()))),
            ("tls", Get::Bool(|s| s.decrypted || s.dirs.iter().any(|d| d.encrypted))),
            ("tls_decrypted", Get::Bool(|s| s.decrypted)),
            ("frame_max", Get::Opt(|s| hs(s, |h| h.frame_max))),
            ("channel_max", Get::Opt(|s| hs(s, |h| h.channel_max))),
            ("heartbeat_s", Get::Opt(|s| hs(s, |h| h.heartbeat))),
            ("idle_timeout_c2s_ms", Get::Opt(|s| hs(s, |h| h.idle_timeout_ms[side(s, true)]))),
            ("idle_timeout_s2c_ms", Get::Opt(|s| hs(s, |h| h.idle_timeout_ms[side(s, false)]))),
            ("vhost", Get::Text(|s| hs(s, |h| h.vhost.clone()))),
            ("user", Get::Text(|s| hs(s, |h| h.user.clone()))),
            ("mechanism", Get::Text(|s| hs(s, |h| h.mechanism.clone()))),
            ("client_product", Get::Text(|s| hs(s, |h| h.client_product.clone()))),
            ("client_version", Get::Text(|s| hs(s, |h| h.client_version.clone()))),
            ("client_platform", Get::Text(|s| hs(s, |h| h.client_platform.clone()))),
            // (AMQP 0-9-1's client property, or AMQP 1.0's client open: `Handshake::amqp10_name`)
            ("connection_name", Get::Text(|s| hs(s, |h| h.connection_name.clone().or_else(|| h.amqp10_name[side(s, true)].clone())))),
            ("server_product", Get::Text(|s| hs(s, |h| h.server_product.clone()))),
            ("server_version", Get::Text(|s| hs(s, |h| h.server_version.clone()))),
            ("mss_c2s", Get::Opt(|s| client(s).syn_options.and_then(|o| o.mss).map(u64::from))),
            ("mss_s2c", Get::Opt(|s| broker(s).syn_options.and_then(|o| o.mss).map(u64::from))),
            ("window_scale_c2s", Get::Opt(|s| client(s).syn_options.and_then(|o| o.window_scale).map(u64::from))),
            ("window_scale_s2c", Get::Opt(|s| broker(s).syn_options.and_then(|o| o.window_scale).map(u64::from))),
            ("frames", Get::I64(|s| s.info.frames as i64)),
            ("c2s_bytes_decoded", Get::I64(|s| client(s).bytes_decoded as i64)),
            ("s2c_bytes_decoded", Get::I64(|s| broker(s).bytes_decoded as i64)),
            ("c2s_bytes_skipped", Get::I64(|s| client(s).bytes_skipped as i64)),
            ("s2c_bytes_skipped", Get::I64(|s| broker(s).bytes_skipped as i64)),
            ("c2s_bytes_missing", Get::I64(|s| client(s).reasm.bytes_missing as i64)),
            ("s2c_bytes_missing", Get::I64(|s| broker(s).reasm.bytes_missing as i64)),
            ("bytes_missing", Get::I64(|s| (s.dirs[0].reasm.bytes_missing + s.dirs[1].reasm.bytes_missing) as i64)),
            ("c2s_stream_bytes", Get::I64(|s| stream_bytes(s, client(s)) as i64)),
            ("s2c_stream_bytes", Get::I64(|s| stream_bytes(s, broker(s)) as i64)),
            ("anomalies", Get::I64(|s| s.info.anomalies as i64)),
        ];
        let n = streams.iter().enumerate().filter(|(i, s)| s.kind == Kind::Amqp && keep(*i)).count();
        let mut cols: Vec<Build> = spec
            .iter()
            .map(|(_, g)| match g {
                Get::I32(_) => Build::I32(Vec::with_capacity(n)),
                Get::I64(_) => Build::I64(Vec::with_capacity(n)),
                Get::Ts(_) => Build::Ts(Vec::with_capacity(n)),
                Get::Bool(_) => Build::Bool(Vec::with_capacity(n)),
                Get::Opt(_) => Build::Opt(Vec::with_capacity(n), Vec::with_capacity(n)),
                Get::Text(_) => Build::Text(StrCol::default()),
            })
            .collect();
        let mut i = 0usize;
        for chunk in streams.chunks {
            for s in chunk.iter() {
                i += 1;
                if s.kind != Kind::Amqp || !keep(i - 1) {
                    continue;
                }
                let i = i - 1;
                for ((_, get), col) in spec.iter().zip(cols.iter_mut()) {
                    match (get, col) {
                        (Get::I32(f), Build::I32(v)) => v.push(f(i, s)),
                        (Get::I64(f), Build::I64(v)) | (Get::Ts(f), Build::Ts(v)) => v.push(f(s)),
                        (Get::Bool(f), Build::Bool(v)) => v.push(f(s)),
                        (Get::Opt(f), Build::Opt(v, m)) => {
                            let x = f(s);
                            v.push(x.unwrap_or(0) as i64);
                            m.push(x.is_some());
                        }
                        (Get::Text(f), Build::Text(c)) => {
                            c.push(f(s).as_deref().map(str::as_bytes))
                        }
                        _ => unreachable!("column builder of another kind"),
                    }
                }
            }
        }
        spec.iter()
            .zip(cols)
            .map(|((name, _), col)| {
                let c = match col {
                    Build::I32(v) => Column::I32(v),
                    Build::I64(v) => Column::I64(v),
                    Build::Ts(v) => Column::Ts(v),
                    Build::Bool(v) => Column::Bool(v),
                    Build::Opt(v, m) => Column::NullI64(v, m),
                    Build::Text(c) => c.finish_text(),
                };
                (*name, c)
            })
            .collect()
    }
}

/// The direction's byte span. For a decrypted TLS stream the decoded and skipped bytes are
/// plaintext, so its span is the plaintext decoded from it plus the ciphertext bytes the capture
/// lost (TLS cannot be decrypted past them).
pub(crate) fn stream_bytes(s: &Stream, d: &Dir) -> u64 {
    if s.decrypted {
        d.bytes_decoded + d.bytes_skipped + d.reasm.bytes_missing
    } else {
        d.reasm.span()
    }
}
