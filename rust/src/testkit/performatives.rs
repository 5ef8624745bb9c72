//! The amqp10_performatives harness: arbitrary bytes as an AMQP 1.0 frame body, through the
//! pure decoding layer (`proto/amqp10/types.rs`, `proto/amqp10/performatives.rs`).

use crate::proto::amqp10::parser::Need;
use crate::proto::amqp10::performatives::{decode_message, decode_performative, sasl_plain_authcid, Message, Performative, Symbols};
use crate::proto::amqp10::types::{decode, decode_complete, validate, Bad, Encoded, Value, MAX_NESTING};

/// Values longer than this are not cut at every octet (the check is quadratic).
const PREFIX_CHECK_BYTES: usize = 4096;

/// `inner` lies inside `outer` (a borrowed slice of the input, not a copy or past its end).
fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    i >= o && i + inner.len() <= o + outer.len()
}

/// Read all of `e` as [`validate`] does, checking on the way that every value's data lies
/// inside the input, that compounds and arrays yield at most their count of elements, and that
/// nesting stays under [`MAX_NESTING`]; the result must be [`validate`]'s.
fn walk(input: &[u8], e: &Encoded, level: u32) -> Result<(), Bad> {
    assert!(within(input, e.data), "a value's data outside the input");
    assert!(level <= 2 * MAX_NESTING as u32 + 2, "nested deeper than the cap");
    match e.value()? {
        Value::Described(d) => {
            assert!(e.is_described());
            walk(input, &d.value, level + 1)
        }
        Value::List(c) | Value::Map(c) => {
            let mut it = c.iter();
            let mut n = 0u32;
            for x in it.by_ref() {
                n += 1;
                assert!(n <= c.count, "more elements than the count");
                walk(input, &x?, level + 1)?;
            }
            match it.rest_len() {
                0 => Ok(()),
                left => Err(Bad::Leftover(left as u32)),
            }
        }
        Value::Array(a) => {
            let mut it = a.iter();
            let mut n = 0u32;
            for x in it.by_ref() {
                n += 1;
                assert!(n <= a.count, "more elements than the count");
                walk(input, &x?, level + 1)?;
            }
            match it.rest_len() {
                0 => Ok(()),
                left => Err(Bad::Leftover(left as u32)),
            }
        }
        Value::Binary(b) => {
            assert!(within(input, b));
            Ok(())
        }
        Value::String(s) | Value::Symbol(s) => {
            assert!(within(input, s.as_bytes()));
            Ok(())
        }
        _ => Ok(()),
    }
}

fn symbols_within(input: &[u8], s: Symbols) {
    for x in s.iter().flatten() {
        assert!(within(input, x.as_bytes()), "a symbol outside the input");
    }
}

/// A message's measured sections fit its payload; a cut one ends past it.
fn check_message(payload: &[u8], m: &Message) {
    let measured = [m.delivery_annotations_bytes, m.message_annotations_bytes, m.application_properties_bytes, m.footer_bytes]
        .iter()
        .map(|b| b.unwrap_or(0))
        .sum::<u64>()
        + m.body_bytes;
    assert!(measured <= payload.len() as u64, "sections measure {measured} octets of {}", payload.len());
    assert!(m.body_sections as u64 <= payload.len() as u64);
    if let Some(Need(n)) = m.cut {
        assert!(n > payload.len(), "a cut section that ends inside the payload");
    }
    if let Some(p) = m.properties {
        for s in [p.to, p.subject, p.reply_to, p.content_type].into_iter().flatten() {
            assert!(within(payload, s.as_bytes()));
        }
        assert!(p.user_id_bytes.unwrap_or(0) <= payload.len());
    }
}

/// `data` as a frame body: its first value read by the type system and as a performative, what
/// follows a transfer as message sections, the whole as message sections and as a sasl-init.
/// Invariants: no panic; every value read takes at most the input's octets and borrows from it;
/// a value cut at any octet needs more (at most its own length), never is bad or a value;
/// reading where the bytes are complete turns "need more" into [`Bad::Overrun`] and nothing
/// else; [`validate`] agrees with a walk of the whole value; a performative's payload is the
/// input's tail; measured message sections fit their payload.
pub fn amqp10_performatives(data: &[u8]) {
    match decode(data) {
        Ok(Ok((e, n))) => {
            assert!(n >= 1 && n <= data.len(), "a value of {n} octets in {}", data.len());
            assert!(within(data, e.data));
            assert_eq!(decode_complete(data), Ok((e, n)));
            assert_eq!(walk(data, &e, 0), validate(&e), "validate and the walk disagree");
            if n <= PREFIX_CHECK_BYTES {
                for cut in 0..n {
                    match decode(&data[..cut]) {
                        Err(Need(m)) => assert!(m > cut && m <= n, "cut at {cut} of {n}: Need({m})"),
                        other => panic!("a value of {n} octets cut at {cut}: {other:?}"),
                    }
                }
            }
        }
        Ok(Err(bad)) => assert_eq!(decode_complete(data).map(|_| ()), Err(bad)),
        Err(Need(m)) => {
            assert!(m > data.len(), "Need({m}) with {} octets", data.len());
            assert_eq!(decode_complete(data).map(|_| ()), Err(Bad::Overrun));
        }
    }

    if let Ok((p, payload)) = decode_performative(data) {
        assert!(within(data, payload) && payload.as_ptr() as usize + payload.len() == data.as_ptr() as usize + data.len(), "the payload is not the input's tail");
        // the performative alone decodes the same
        let head = &data[..data.len() - payload.len()];
        assert_eq!(decode_performative(head).map(|(q, rest)| (q, rest.len())), Ok((p, 0)));
        match p {
            Performative::Open(o) => {
                for s in [o.outgoing_locales, o.incoming_locales, o.offered_capabilities, o.desired_capabilities] {
                    symbols_within(data, s);
                }
                assert!(within(data, o.container_id.as_bytes()));
            }
            Performative::Attach(a) => {
                assert!(within(data, a.name.as_bytes()));
                symbols_within(data, a.offered_capabilities);
            }
            Performative::SaslMechanisms { mechanisms } => symbols_within(data, mechanisms),
            Performative::Transfer(t) => {
                if let Some(tag) = t.delivery_tag {
                    assert!(within(data, tag));
                }
                if let Ok(m) = decode_message(payload) {
                    check_message(payload, &m);
                }
            }
            _ => {}
        }
    }
    if let Ok(m) = decode_message(data) {
        check_message(data, &m);
    }
    if let Some(user) = sasl_plain_authcid(data) {
        assert!(within(data, user.as_bytes()) && !user.contains('\0'));
    }
}
