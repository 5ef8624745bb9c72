//! The AMQP 1.0 type system (OASIS AMQP 1.0, Part 1 "Types"): pure functions over bytes that
//! read one encoded value, separating "need more bytes" ([`Need`], from the start of the slice)
//! from "bad bytes" ([`Bad`]), as the framing parsers do (`parser.rs`).
//!
//! A value is a constructor then its data (Part 1 §1.2): the constructor is a format code, or
//! `0x00`, a descriptor and another constructor (a described type; chains nest). Nothing is
//! copied or allocated: [`decode`] checks the value's layout (its constructor, its size, and
//! for a compound or an array that its count fits its octets) and hands back an [`Encoded`]
//! that borrows the bytes; [`Encoded::value`] reads it as a [`Value`], whose lists, maps and
//! arrays are read element by element ([`Compound::iter`], [`Array::iter`]) only when asked.
//! [`validate`] reads a whole value, every element down to [`MAX_NESTING`].
//!
//! Caps (no allocation depends on a count):
//! - a count is bounded by the octets that hold the elements: a list claiming 2^32 elements in
//!   ten bytes is [`Bad::Count`], not a loop of 2^32 steps;
//! - values nest at most [`MAX_NESTING`] deep (descriptor links and compound levels counted
//!   alike), so that code walking a value recursively has a bounded stack.

use super::parser::Need;

/// How deep values may nest: each compound (list, map, array) and each described-type link
/// adds one level. The spec sets no bound (Part 1 §1.6.22-24 let compounds hold any value); a
/// frame's deepest standard structure is about six levels (attach > source > filter map >
/// described filter > its value). Past it a value is [`Bad::TooDeep`]. A fixed structural
/// constant, not a resource cap: nothing is allocated per level; it bounds recursion only.
pub const MAX_NESTING: u8 = 32;

/// Why bytes are no valid AMQP 1.0 value (or, for `performatives.rs`, no valid performative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// A format code that no encoding has (Part 1 §1.6's encoding tables).
    UnknownCode(u8),
    /// A compound or array whose size cannot hold its count field (and, for an array, its
    /// element constructor).
    Size { code: u8, size: u32 },
    /// A compound or array claiming more elements than its octets can hold (each list or map
    /// element takes at least its constructor octet; an array's fixed-width elements their
    /// width).
    Count { code: u8, count: u32 },
    /// A map with an odd number of elements: keys and values alternate (Part 1 §1.6.23).
    OddMap(u32),
    /// A value runs past the end of the compound, array or frame body that holds it.
    Overrun,
    /// Octets left in a compound or array after its last element.
    Leftover(u32),
    /// Values nested deeper than [`MAX_NESTING`].
    TooDeep,
    /// A boolean (0x56) octet other than 0x00 or 0x01 (Part 1 §1.6.2).
    Boolean(u8),
    /// A char that is no Unicode scalar value (UTF-32BE, Part 1 §1.6.16).
    Char(u32),
    /// A string that is not UTF-8 (Part 1 §1.6.20) or a symbol that is not ASCII (§1.6.21).
    Text(u8),
    /// A descriptor that is neither a ulong nor a symbol: reserved (Part 1 §1.5).
    Descriptor(u8),
    /// `performatives.rs`: a field of another type than the spec's (its format code).
    WrongType { field: &'static str, code: u8 },
    /// `performatives.rs`: a mandatory field absent or null.
    Missing(&'static str),
    /// `performatives.rs`: a field value outside the spec's choices (settle modes).
    OutOfRange { field: &'static str, value: u64 },
    /// `performatives.rs`: a frame body or message section that is no described type (its
    /// format code).
    NotDescribed(u8),
    /// `performatives.rs`: a message section with a descriptor no section has (its code; `None`
    /// for a symbol that names none).
    UnknownSection(Option<u64>),
}

/// What went wrong inside: more bytes needed (from the start of the slice read), or bad ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum E {
    Need(usize),
    Bad(Bad),
}

impl From<Bad> for E {
    fn from(b: Bad) -> Self {
        E::Bad(b)
    }
}

type R<T> = Result<T, E>;

/// `r` read from `at` octets into the slice: a [`Need`] counted from the slice's start.
fn shift<T>(r: R<T>, at: usize) -> R<T> {
    r.map_err(|e| match e {
        E::Need(n) => E::Need(n.saturating_add(at)),
        bad => bad,
    })
}

/// Read inside bytes known complete (a compound, an array, a frame body): needing more is bad.
fn complete<T>(r: R<T>) -> Result<T, Bad> {
    r.map_err(|e| match e {
        E::Need(_) => Bad::Overrun,
        E::Bad(b) => b,
    })
}

fn need(b: &[u8], n: usize) -> R<()> {
    if b.len() < n {
        Err(E::Need(n))
    } else {
        Ok(())
    }
}

/// A big-endian u32 at `b[at..at + 4]` (present).
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The first `N` octets of `b` (present).
fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// Octets of a fixed-width encoding's data (Part 1 §1.2: the format code's high nibble gives
/// the category; §1.6 lists the codes that exist); `None` for other codes.
fn fixed_width(code: u8) -> Option<usize> {
    Some(match code {
        // null, true, false, uint0, ulong0, list0
        0x40..=0x45 => 0,
        // ubyte, byte, smalluint, smallulong, smallint, smalllong, boolean
        0x50..=0x56 => 1,
        // ushort, short
        0x60 | 0x61 => 2,
        // uint, int, float, char, decimal32
        0x70..=0x74 => 4,
        // ulong, long, double, timestamp, decimal64
        0x80..=0x84 => 8,
        // decimal128, uuid
        0x94 | 0x98 => 16,
        _ => return None,
    })
}

/// The width of the size (and count) fields of a variable, compound or array encoding: 1
/// octet for the 0xa/0xc/0xe categories, 4 for 0xb/0xd/0xf (Part 1 §1.2).
fn size_width(code: u8) -> usize {
    if code & 0x10 == 0 {
        1
    } else {
        4
    }
}

/// A size or count field of `w` octets at `b[at..]` (present).
fn read_size(b: &[u8], at: usize, w: usize) -> u32 {
    if w == 1 {
        b[at] as u32
    } else {
        be32(b, at)
    }
}

/// The length of the data of a value with format code `code`, at the start of `b` (after the
/// constructor), checking its layout; `depth` is the value's nesting level.
fn data_len(code: u8, b: &[u8], depth: u8) -> R<usize> {
    if let Some(w) = fixed_width(code) {
        need(b, w)?;
        return Ok(w);
    }
    match code {
        // vbin8, str8-utf8, sym8; vbin32, str32-utf8, sym32 (Part 1 §1.6.19-21)
        0xa0 | 0xa1 | 0xa3 | 0xb0 | 0xb1 | 0xb3 => {
            let w = size_width(code);
            need(b, w)?;
            let n = w.saturating_add(read_size(b, 0, w) as usize);
            need(b, n)?;
            Ok(n)
        }
        // list8, map8; list32, map32: size, count, elements (§1.6.22-23); arrays: size, count,
        // the element constructor, the elements' data (§1.6.24)
        0xc0 | 0xc1 | 0xd0 | 0xd1 | 0xe0 | 0xf0 => {
            let w = size_width(code);
            let is_array = code & 0xe0 == 0xe0;
            need(b, w)?;
            let size = read_size(b, 0, w);
            // the count field inside the size, and an array's constructor octet too
            let least = if is_array { w + 1 } else { w };
            if (size as usize) < least {
                return Err(Bad::Size { code, size }.into());
            }
            need(b, 2 * w)?;
            let count = read_size(b, w, w);
            // each element takes at least an octet, except an array's zero-width ones, which
            // are still bounded by the array's octets
            if count as usize > size as usize - w {
                return Err(Bad::Count { code, count }.into());
            }
            if code & 0x01 == 1 && count % 2 == 1 {
                return Err(Bad::OddMap(count).into());
            }
            let end = w.saturating_add(size as usize);
            need(b, end)?;
            if is_array {
                let items = &b[2 * w..end];
                let (chain, elem) = complete(constructor(items, depth.saturating_add(1)))?;
                if let Some(ew) = fixed_width(elem) {
                    if (count as usize).saturating_mul(ew) > items.len() - chain - 1 {
                        return Err(Bad::Count { code, count }.into());
                    }
                }
            }
            Ok(end)
        }
        _ => Err(Bad::UnknownCode(code).into()),
    }
}

/// The constructor at the start of `b` for a value at nesting level `depth`: the length of its
/// descriptor chain (each link `0x00 descriptor`, Part 1 §1.2) and the format code after it.
/// Each link is a level; a descriptor must be a ulong or a symbol (Part 1 §1.5).
fn constructor(b: &[u8], depth: u8) -> R<(usize, u8)> {
    let mut at = 0;
    let mut level = depth;
    loop {
        let Some(&c) = b.get(at) else { return Err(E::Need(at + 1)) };
        if c != 0x00 {
            if level > MAX_NESTING {
                return Err(Bad::TooDeep.into());
            }
            return Ok((at, c));
        }
        level = level.saturating_add(1);
        if level > MAX_NESTING {
            return Err(Bad::TooDeep.into());
        }
        let d = at + 1;
        let Some(&dc) = b.get(d) else { return Err(E::Need(d + 1)) };
        if !matches!(dc, 0x44 | 0x53 | 0x80 | 0xa3 | 0xb3) {
            return Err(Bad::Descriptor(dc).into());
        }
        let n = shift(data_len(dc, &b[d + 1..], level), d + 1)?;
        at = d + 1 + n;
    }
}

/// One encoded value, borrowed from the bytes it was read from: its layout checked, its
/// content read on demand ([`Encoded::value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded<'a> {
    /// The descriptor chain before the format code, each link `0x00 descriptor`, outermost
    /// first; empty for a primitive value.
    chain: &'a [u8],
    /// The format code (Part 1 §1.6).
    pub code: u8,
    /// The value's data after its constructor (for an array element, the element's data).
    pub data: &'a [u8],
    /// Nesting level: 0 for a value read by [`decode`].
    depth: u8,
}

/// The value at the start of `b` and the octets it takes.
pub fn decode(b: &[u8]) -> Result<Result<(Encoded<'_>, usize), Bad>, Need> {
    match decode_at(b, 0) {
        Ok(v) => Ok(Ok(v)),
        Err(E::Need(n)) => Err(Need(n)),
        Err(E::Bad(bad)) => Ok(Err(bad)),
    }
}

/// The value at the start of `b`, read where the bytes are complete (a frame body): a value
/// running past the end is [`Bad::Overrun`].
pub fn decode_complete(b: &[u8]) -> Result<(Encoded<'_>, usize), Bad> {
    complete(decode_at(b, 0))
}

fn decode_at(b: &[u8], depth: u8) -> R<(Encoded<'_>, usize)> {
    let (chain, code) = constructor(b, depth)?;
    let at = chain + 1;
    let n = shift(data_len(code, &b[at..], depth), at)?;
    Ok((Encoded { chain: &b[..chain], code, data: &b[at..at + n], depth }, at + n))
}

/// A descriptor (Part 1 §1.5): a numeric code (`domain-id << 32 | descriptor-id`; OASIS's
/// domain is 0) or a symbolic name such as `amqp:open:list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Descriptor<'a> {
    Code(u64),
    Symbol(&'a str),
}

/// A described value: its (outermost) descriptor and the value it describes, which may be
/// described again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Described<'a> {
    pub descriptor: Descriptor<'a>,
    pub value: Encoded<'a>,
}

/// A list or a map (Part 1 §1.6.22-23): `count` elements (a map's keys and values
/// alternate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compound<'a> {
    pub count: u32,
    elements: &'a [u8],
    /// The elements' nesting level.
    depth: u8,
}

/// An array (Part 1 §1.6.24): `count` elements of one constructor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Array<'a> {
    pub count: u32,
    /// The elements' descriptor chain and format code.
    chain: &'a [u8],
    pub element_code: u8,
    items: &'a [u8],
    depth: u8,
}

/// A decoded value (Part 1 §1.6). Every encoding of a type gives the same variant:
/// smalluint and uint0 are `Uint`, smallulong and ulong0 `Ulong`, smallint `Int`, smalllong
/// `Long`, list0 an empty `List`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Null,
    Boolean(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    /// IEEE 754 decimal encodings, kept as their octets (big-endian, Part 1 §1.6.13-15).
    Decimal32([u8; 4]),
    Decimal64([u8; 8]),
    Decimal128([u8; 16]),
    Char(char),
    /// Milliseconds since the Unix epoch (Part 1 §1.6.17).
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(&'a [u8]),
    String(&'a str),
    Symbol(&'a str),
    List(Compound<'a>),
    Map(Compound<'a>),
    Array(Array<'a>),
    Described(Described<'a>),
}

impl<'a> Encoded<'a> {
    /// A null (0x40) with no descriptor: an absent field (Part 1 §1.4).
    pub fn is_null(&self) -> bool {
        self.chain.is_empty() && self.code == 0x40
    }

    pub fn is_described(&self) -> bool {
        !self.chain.is_empty()
    }

    /// The outermost descriptor and the value it describes; `None` for a primitive value.
    pub fn described(&self) -> Result<Option<Described<'a>>, Bad> {
        if self.chain.is_empty() {
            return Ok(None);
        }
        // the chain was checked when the value was read; its first link is `0x00 d`
        let (descriptor, n) = match self.chain {
            // a smallulong code, as every performative and section is sent: read at once
            [0x00, 0x53, c, ..] => (Descriptor::Code(*c as u64), 2),
            _ => {
                let (d, n) = complete(decode_at(&self.chain[1..], self.depth.saturating_add(1)))?;
                let descriptor = match d.value()? {
                    Value::Ulong(c) => Descriptor::Code(c),
                    Value::Symbol(s) => Descriptor::Symbol(s),
                    _ => return Err(Bad::Descriptor(d.code)),
                };
                (descriptor, n)
            }
        };
        let value = Encoded { chain: &self.chain[1 + n..], depth: self.depth.saturating_add(1), ..*self };
        if value.depth > MAX_NESTING {
            return Err(Bad::TooDeep);
        }
        Ok(Some(Described { descriptor, value }))
    }

    /// The value. A described one is [`Value::Described`]; lists, maps and arrays are read
    /// element by element from what is returned.
    pub fn value(&self) -> Result<Value<'a>, Bad> {
        if let Some(d) = self.described()? {
            return Ok(Value::Described(d));
        }
        let b = self.data;
        let text = |b: &'a [u8], ascii: bool| {
            if ascii && !b.is_ascii() {
                return Err(Bad::Text(self.code));
            }
            std::str::from_utf8(b).map_err(|_| Bad::Text(self.code))
        };
        let inner = self.depth.saturating_add(1);
        if inner > MAX_NESTING && matches!(self.code, 0xc0 | 0xc1 | 0xd0 | 0xd1 | 0xe0 | 0xf0) {
            return Err(Bad::TooDeep);
        }
        // The data's length was checked against the format code when the value was read.
        Ok(match self.code {
            0x40 => Value::Null,
            0x41 => Value::Boolean(true),
            0x42 => Value::Boolean(false),
            0x56 => match b[0] {
                0 => Value::Boolean(false),
                1 => Value::Boolean(true),
                o => return Err(Bad::Boolean(o)),
            },
            0x43 => Value::Uint(0),
            0x44 => Value::Ulong(0),
            0x45 => Value::List(Compound { count: 0, elements: &[], depth: inner }),
            0x50 => Value::Ubyte(b[0]),
            0x51 => Value::Byte(b[0] as i8),
            0x52 => Value::Uint(b[0] as u32),
            0x53 => Value::Ulong(b[0] as u64),
            0x54 => Value::Int(b[0] as i8 as i32),
            0x55 => Value::Long(b[0] as i8 as i64),
            0x60 => Value::Ushort(u16::from_be_bytes(arr(b))),
            0x61 => Value::Short(i16::from_be_bytes(arr(b))),
            0x70 => Value::Uint(u32::from_be_bytes(arr(b))),
            0x71 => Value::Int(i32::from_be_bytes(arr(b))),
            0x72 => Value::Float(f32::from_be_bytes(arr(b))),
            0x73 => {
                let c = u32::from_be_bytes(arr(b));
                Value::Char(char::from_u32(c).ok_or(Bad::Char(c))?)
            }
            0x74 => Value::Decimal32(arr(b)),
            0x80 => Value::Ulong(u64::from_be_bytes(arr(b))),
            0x81 => Value::Long(i64::from_be_bytes(arr(b))),
            0x82 => Value::Double(f64::from_be_bytes(arr(b))),
            0x83 => Value::Timestamp(i64::from_be_bytes(arr(b))),
            0x84 => Value::Decimal64(arr(b)),
            0x94 => Value::Decimal128(arr(b)),
            0x98 => Value::Uuid(arr(b)),
            0xa0 => Value::Binary(&b[1..]),
            0xb0 => Value::Binary(&b[4..]),
            0xa1 => Value::String(text(&b[1..], false)?),
            0xb1 => Value::String(text(&b[4..], false)?),
            0xa3 => Value::Symbol(text(&b[1..], true)?),
            0xb3 => Value::Symbol(text(&b[4..], true)?),
            0xc0 | 0xc1 | 0xd0 | 0xd1 => {
                let w = size_width(self.code);
                let c = Compound { count: read_size(b, w, w), elements: &b[2 * w..], depth: inner };
                if self.code & 1 == 1 {
                    Value::Map(c)
                } else {
                    Value::List(c)
                }
            }
            0xe0 | 0xf0 => {
                let w = size_width(self.code);
                let items = &b[2 * w..];
                let (chain, element_code) = complete(constructor(items, inner))?;
                Value::Array(Array {
                    count: read_size(b, w, w),
                    chain: &items[..chain],
                    element_code,
                    items: &items[chain + 1..],
                    depth: inner,
                })
            }
            other => return Err(Bad::UnknownCode(other)),
        })
    }
}

/// Typed readers for the fields whose type the spec fixes (a transfer's handle, a flow's
/// link-credit): the value when `self` is a primitive of that type, `None` for any other
/// (described, null, another type). They read the encodings [`Encoded::value`] reads, without
/// building a [`Value`]: a transfer, flow or disposition is read field by field this way
/// (building a [`Value`] for each field cost about 7% of a 1.0 capture's decoding instructions,
/// `docs/speed.md`). `tests::typed_readers_agree_with_value` holds them to [`Encoded::value`].
impl<'a> Encoded<'a> {
    fn primitive(&self) -> Option<(u8, &'a [u8])> {
        self.chain.is_empty().then_some((self.code, self.data))
    }

    /// uint0, smalluint, uint (Part 1 §1.6.6).
    pub fn uint(&self) -> Option<u32> {
        match self.primitive()? {
            (0x43, _) => Some(0),
            (0x52, b) => Some(b[0] as u32),
            (0x70, b) => Some(be32(b, 0)),
            _ => None,
        }
    }

    /// ulong0, smallulong, ulong (§1.6.7).
    pub fn ulong(&self) -> Option<u64> {
        match self.primitive()? {
            (0x44, _) => Some(0),
            (0x53, b) => Some(b[0] as u64),
            (0x80, b) => Some(u64::from_be_bytes(arr(b))),
            _ => None,
        }
    }

    /// ubyte (§1.6.4).
    pub fn ubyte(&self) -> Option<u8> {
        match self.primitive()? {
            (0x50, b) => Some(b[0]),
            _ => None,
        }
    }

    /// ushort (§1.6.5).
    pub fn ushort(&self) -> Option<u16> {
        match self.primitive()? {
            (0x60, b) => Some(u16::from_be_bytes(arr(b))),
            _ => None,
        }
    }

    /// true, false, boolean (§1.6.2); an 0x56 octet other than 0 or 1 is bad.
    pub fn boolean(&self) -> Option<Result<bool, Bad>> {
        match self.primitive()? {
            (0x41, _) => Some(Ok(true)),
            (0x42, _) => Some(Ok(false)),
            (0x56, b) => Some(match b[0] {
                0 => Ok(false),
                1 => Ok(true),
                o => Err(Bad::Boolean(o)),
            }),
            _ => None,
        }
    }

    /// vbin8, vbin32 (§1.6.19).
    pub fn binary(&self) -> Option<&'a [u8]> {
        match self.primitive()? {
            (0xa0, b) => Some(&b[1..]),
            (0xb0, b) => Some(&b[4..]),
            _ => None,
        }
    }
}

impl<'a> Compound<'a> {
    pub fn iter(&self) -> Elements<'a> {
        Elements { rest: self.elements, left: self.count, depth: self.depth }
    }
}

/// The elements of a list or map, in order; after an error, nothing more.
#[derive(Debug, Clone)]
pub struct Elements<'a> {
    rest: &'a [u8],
    left: u32,
    depth: u8,
}

impl<'a> Elements<'a> {
    /// Octets after the elements read so far (after the last one: octets left over).
    pub fn rest_len(&self) -> usize {
        self.rest.len()
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Encoded<'a>, Bad>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        // Most fields of a transfer, flow or disposition are fixed-width primitives (uint,
        // boolean, null): read here, they skip `decode_at`, which gives the same `Encoded`
        // through three nested results (moving those through the stack was a third of AMQP
        // 1.0's decoding, `docs/speed.md`). Other values (sized, described) take `decode_at`:
        // reading them here too measured slower.
        if let Some(&code) = self.rest.first() {
            if let Some(w) = fixed_width(code).filter(|&w| self.rest.len() > w && self.depth <= MAX_NESTING) {
                let e = Encoded { chain: &[], code, data: &self.rest[1..1 + w], depth: self.depth };
                self.left -= 1;
                self.rest = &self.rest[1 + w..];
                return Some(Ok(e));
            }
        }
        match complete(decode_at(self.rest, self.depth)) {
            Ok((e, n)) => {
                self.left -= 1;
                self.rest = &self.rest[n..];
                Some(Ok(e))
            }
            Err(bad) => {
                self.left = 0;
                Some(Err(bad))
            }
        }
    }
}

impl<'a> Array<'a> {
    pub fn iter(&self) -> ArrayElements<'a> {
        ArrayElements { array: *self, rest: self.items, left: self.count }
    }
}

/// The elements of an array, each an [`Encoded`] with the array's element constructor.
#[derive(Debug, Clone)]
pub struct ArrayElements<'a> {
    array: Array<'a>,
    rest: &'a [u8],
    left: u32,
}

impl<'a> ArrayElements<'a> {
    /// Octets after the elements read so far.
    pub fn rest_len(&self) -> usize {
        self.rest.len()
    }
}

impl<'a> Iterator for ArrayElements<'a> {
    type Item = Result<Encoded<'a>, Bad>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let a = self.array;
        match complete(data_len(a.element_code, self.rest, a.depth)) {
            Ok(n) => {
                self.left -= 1;
                let e = Encoded { chain: a.chain, code: a.element_code, data: &self.rest[..n], depth: a.depth };
                self.rest = &self.rest[n..];
                Some(Ok(e))
            }
            Err(bad) => {
                self.left = 0;
                Some(Err(bad))
            }
        }
    }
}

/// Read all of `e`: every element of its compounds and arrays, every link of its descriptor
/// chains, every primitive's content (booleans, chars, text), and no octets left over inside
/// a compound or array. Recursion is bounded by [`MAX_NESTING`].
pub fn validate(e: &Encoded) -> Result<(), Bad> {
    match e.value()? {
        Value::Described(d) => validate(&d.value),
        Value::List(c) | Value::Map(c) => {
            let mut it = c.iter();
            for x in it.by_ref() {
                validate(&x?)?;
            }
            match it.rest_len() {
                0 => Ok(()),
                n => Err(Bad::Leftover(n as u32)),
            }
        }
        Value::Array(a) => {
            let mut it = a.iter();
            for x in it.by_ref() {
                validate(&x?)?;
            }
            match it.rest_len() {
                0 => Ok(()),
                n => Err(Bad::Leftover(n as u32)),
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value `b` holds, whole: it takes every octet.
    fn whole(b: &[u8]) -> Encoded<'_> {
        let (e, n) = decode(b).unwrap().unwrap();
        assert_eq!(n, b.len(), "{b:02x?}");
        e
    }

    fn value(b: &[u8]) -> Value<'_> {
        whole(b).value().unwrap()
    }

    fn bad(b: &[u8]) -> Bad {
        decode(b).unwrap().unwrap_err()
    }

    /// Each primitive encoding (Part 1 §1.6.1-21), every width, bytes written from the spec's
    /// encoding tables.
    #[test]
    fn every_primitive_encoding() {
        let cases: &[(&[u8], Value)] = &[
            (&[0x40], Value::Null),
            (&[0x41], Value::Boolean(true)),
            (&[0x42], Value::Boolean(false)),
            (&[0x56, 0x01], Value::Boolean(true)),
            (&[0x56, 0x00], Value::Boolean(false)),
            (&[0x50, 0xff], Value::Ubyte(255)),
            (&[0x60, 0x12, 0x34], Value::Ushort(0x1234)),
            (&[0x70, 0x00, 0x00, 0x01, 0x00], Value::Uint(256)),
            (&[0x52, 0x07], Value::Uint(7)), // smalluint
            (&[0x43], Value::Uint(0)),       // uint0
            (&[0x80, 0, 0, 0, 1, 0, 0, 0, 0], Value::Ulong(1 << 32)),
            (&[0x53, 0x10], Value::Ulong(16)), // smallulong
            (&[0x44], Value::Ulong(0)),        // ulong0
            (&[0x51, 0xff], Value::Byte(-1)),
            (&[0x61, 0xff, 0xfe], Value::Short(-2)),
            (&[0x71, 0xff, 0xff, 0xff, 0xfd], Value::Int(-3)),
            (&[0x54, 0xfc], Value::Int(-4)), // smallint
            (&[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfb], Value::Long(-5)),
            (&[0x55, 0xfa], Value::Long(-6)), // smalllong
            (&[0x72, 0x3f, 0xc0, 0x00, 0x00], Value::Float(1.5)),
            (&[0x82, 0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18], Value::Double(std::f64::consts::PI)),
            (&[0x74, 1, 2, 3, 4], Value::Decimal32([1, 2, 3, 4])),
            (&[0x84, 1, 2, 3, 4, 5, 6, 7, 8], Value::Decimal64([1, 2, 3, 4, 5, 6, 7, 8])),
            (&[0x94, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], Value::Decimal128([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15])),
            (&[0x73, 0x00, 0x01, 0xf6, 0x00], Value::Char('\u{1F600}')), // UTF-32BE
            // 2023-11-14T22:13:20Z: 1 700 000 000 000 ms = 0x18BCFE56800
            (&[0x83, 0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00], Value::Timestamp(1_700_000_000_000)),
            (&[0x98, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0], Value::Uuid([15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0])),
            (&[0xa0, 3, 1, 2, 3], Value::Binary(&[1, 2, 3])), // vbin8
            (&[0xb0, 0, 0, 0, 2, 9, 9], Value::Binary(&[9, 9])), // vbin32
            (&[0xa0, 0], Value::Binary(&[])),
            (&[0xa1, 2, b'h', b'i'], Value::String("hi")), // str8-utf8
            (&[0xb1, 0, 0, 0, 2, 0xc3, 0xa9], Value::String("é")), // str32-utf8
            (&[0xa3, 3, b'a', b'b', b'c'], Value::Symbol("abc")), // sym8
            (&[0xb3, 0, 0, 0, 0], Value::Symbol("")), // sym32
        ];
        for (b, v) in cases {
            assert_eq!(value(b), *v, "{b:02x?}");
            assert_eq!(validate(&whole(b)), Ok(()));
            // a value is read from the start of a slice, whatever follows
            let mut more = b.to_vec();
            more.extend([0x40, 0x99]);
            assert_eq!(decode(&more).unwrap().unwrap().1, b.len());
        }
    }

    /// The typed readers give what [`Encoded::value`] gives, for every format code that has a
    /// fixed width or a size (so every code the readers know, and others they must refuse),
    /// plain and described.
    #[test]
    fn typed_readers_agree_with_value() {
        let mut seen = 0;
        for code in 0x40..=0xffu8 {
            for fill in [0x00u8, 0x01, 0x02, 0x7f, 0xff] {
                let mut b = vec![code];
                b.extend(match fixed_width(code) {
                    Some(w) => vec![fill; w],
                    None if matches!(code, 0xa0 | 0xa1 | 0xa3) => vec![2, fill & 0x7f, b'x'],
                    None if matches!(code, 0xb0 | 0xb1 | 0xb3) => vec![0, 0, 0, 1, fill & 0x7f],
                    None => continue,
                });
                let described: Vec<u8> = [0x00, 0x53, 0x70].iter().copied().chain(b.iter().copied()).collect();
                for bytes in [&b, &described] {
                    let e = whole(bytes);
                    let v = e.value();
                    assert_eq!(e.uint(), match v { Ok(Value::Uint(x)) => Some(x), _ => None }, "{bytes:02x?}");
                    assert_eq!(e.ulong(), match v { Ok(Value::Ulong(x)) => Some(x), _ => None }, "{bytes:02x?}");
                    assert_eq!(e.ubyte(), match v { Ok(Value::Ubyte(x)) => Some(x), _ => None }, "{bytes:02x?}");
                    assert_eq!(e.ushort(), match v { Ok(Value::Ushort(x)) => Some(x), _ => None }, "{bytes:02x?}");
                    assert_eq!(e.binary(), match v { Ok(Value::Binary(x)) => Some(x), _ => None }, "{bytes:02x?}");
                    let boolean = match v {
                        Ok(Value::Boolean(x)) => Some(Ok(x)),
                        Err(Bad::Boolean(o)) => Some(Err(Bad::Boolean(o))),
                        _ => None,
                    };
                    assert_eq!(e.boolean(), boolean, "{bytes:02x?}");
                    seen += 1;
                }
            }
        }
        // 0x40-0x45, 0x50-0x56, 0x60-0x61, 0x70-0x74, 0x80-0x84, 0x94, 0x98 and the six sized
        // codes, five fills each, plain and described
        assert_eq!(seen, (6 + 7 + 2 + 5 + 5 + 2 + 6) * 5 * 2);
    }

    fn list(c: Compound<'_>) -> Vec<Value<'_>> {
        c.iter().map(|e| e.unwrap().value().unwrap()).collect()
    }

    #[test]
    fn lists_maps_and_arrays_in_both_widths() {
        assert_eq!(value(&[0x45]), Value::List(Compound { count: 0, elements: &[], depth: 1 })); // list0
        // list8: size 4 (count octet + 3), count 2: true, smalluint 9
        let Value::List(l) = value(&[0xc0, 4, 2, 0x41, 0x52, 9]) else { panic!() };
        assert_eq!(list(l), [Value::Boolean(true), Value::Uint(9)]);
        // list32: size 7 (4 count octets + 3), count 1: str8 "z"
        let Value::List(l) = value(&[0xd0, 0, 0, 0, 7, 0, 0, 0, 1, 0xa1, 1, b'z']) else { panic!() };
        assert_eq!(list(l), [Value::String("z")]);
        // map8: size 5, count 2 (one key, one value): sym8 "k" -> null
        let Value::Map(m) = value(&[0xc1, 5, 2, 0xa3, 1, b'k', 0x40]) else { panic!() };
        assert_eq!(list(m), [Value::Symbol("k"), Value::Null]);
        // map32: size 4 + 4, count 2: smallulong 1 -> ubyte 2
        let Value::Map(m) = value(&[0xd1, 0, 0, 0, 8, 0, 0, 0, 2, 0x53, 1, 0x50, 2]) else { panic!() };
        assert_eq!(list(m), [Value::Ulong(1), Value::Ubyte(2)]);
        // array8: size 5 (count, constructor 0x52 smalluint, three 1-octet elements), count 3
        let Value::Array(a) = value(&[0xe0, 5, 3, 0x52, 1, 2, 3]) else { panic!() };
        let items: Vec<_> = a.iter().map(|e| e.unwrap().value().unwrap()).collect();
        assert_eq!(items, [Value::Uint(1), Value::Uint(2), Value::Uint(3)]);
        // array32 of sym8: size 4 + 1 + 2 + 3 = 10, count 2: "a", "bc"
        let Value::Array(a) = value(&[0xf0, 0, 0, 0, 10, 0, 0, 0, 2, 0xa3, 1, b'a', 2, b'b', b'c']) else { panic!() };
        let items: Vec<_> = a.iter().map(|e| e.unwrap().value().unwrap()).collect();
        assert_eq!(items, [Value::Symbol("a"), Value::Symbol("bc")]);
        // an array of zero-width elements (true): bounded by its octets
        let Value::Array(a) = value(&[0xe0, 4, 3, 0x41, 0, 0]) else { panic!() };
        assert_eq!(a.iter().count(), 3);
        assert_eq!(validate(&whole(&[0xe0, 4, 3, 0x41, 0, 0])), Err(Bad::Leftover(2)));
        // nested: list8 (size 1 + 1 + 4 + 4) holding list0, list8 [null], an empty array8 of uint
        let b = [0xc0, 10, 3, 0x45, 0xc0, 2, 1, 0x40, 0xe0, 2, 0, 0x70];
        let Value::List(l) = value(&b) else { panic!() };
        assert_eq!(l.iter().count(), 3);
        assert_eq!(validate(&whole(&b)), Ok(()));
    }

    #[test]
    fn described_types_nest_and_take_either_descriptor() {
        // 0x00 smallulong 0x24 list0: accepted (Part 3 §3.4.2), numeric descriptor
        let Value::Described(d) = value(&[0x00, 0x53, 0x24, 0x45]) else { panic!() };
        assert_eq!(d.descriptor, Descriptor::Code(0x24));
        assert_eq!(d.value.value().unwrap(), Value::List(Compound { count: 0, elements: &[], depth: 2 }));
        // the same as ulong and as a symbol
        let b = [0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x24, 0x45];
        assert_eq!(whole(&b).described().unwrap().unwrap().descriptor, Descriptor::Code(0x24));
        let mut b = vec![0x00, 0xa3, 18];
        b.extend(b"amqp:accepted:list");
        b.push(0x45);
        assert_eq!(whole(&b).described().unwrap().unwrap().descriptor, Descriptor::Symbol("amqp:accepted:list"));
        // ulong0 as descriptor: code 0
        assert_eq!(whole(&[0x00, 0x44, 0x40]).described().unwrap().unwrap().descriptor, Descriptor::Code(0));
        // nested: described by code 1 of (described by symbol "foo" of str8 "v")
        let b = [0x00, 0x53, 0x01, 0x00, 0xa3, 3, b'f', b'o', b'o', 0xa1, 1, b'v'];
        let outer = whole(&b).described().unwrap().unwrap();
        assert_eq!(outer.descriptor, Descriptor::Code(1));
        let Value::Described(inner) = outer.value.value().unwrap() else { panic!() };
        assert_eq!(inner.descriptor, Descriptor::Symbol("foo"));
        assert_eq!(inner.value.value().unwrap(), Value::String("v"));
        assert_eq!(validate(&whole(&b)), Ok(()));
        // an array of described lists: element constructor 0x00 0x53 0x28 0xc0 (source list8),
        // size 1 + 4 + 3 + 2 = 10, count 2: [null] and []
        let b = [0xe0, 10, 2, 0x00, 0x53, 0x28, 0xc0, 2, 1, 0x40, 1, 0];
        let Value::Array(a) = value(&b) else { panic!() };
        let items: Vec<_> = a.iter().map(|e| e.unwrap()).collect();
        assert_eq!(items.len(), 2);
        for (item, count) in items.iter().zip([1, 0]) {
            let d = item.described().unwrap().unwrap();
            assert_eq!(d.descriptor, Descriptor::Code(0x28));
            let Value::List(l) = d.value.value().unwrap() else { panic!() };
            assert_eq!(l.count, count);
        }
        assert_eq!(validate(&whole(&b)), Ok(()));
    }

    /// Every complete value cut at every octet needs more, never is bad or a value: at least
    /// one octet more than it has, at most the whole value.
    #[test]
    fn truncated_values_need_more_at_every_octet() {
        let values: &[&[u8]] = &[
            &[0x56, 0x01],
            &[0x60, 0x12, 0x34],
            &[0x70, 0, 0, 1, 0],
            &[0x80, 0, 0, 0, 1, 0, 0, 0, 0],
            &[0x94, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
            &[0x98, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
            &[0xa0, 3, 1, 2, 3],
            &[0xb1, 0, 0, 0, 2, 0xc3, 0xa9],
            &[0xc0, 4, 2, 0x41, 0x52, 9],
            &[0xd1, 0, 0, 0, 8, 0, 0, 0, 2, 0x53, 1, 0x50, 2],
            &[0xf0, 0, 0, 0, 10, 0, 0, 0, 2, 0xa3, 1, b'a', 2, b'b', b'c'],
            &[0x00, 0x53, 0x01, 0x00, 0xa3, 3, b'f', b'o', b'o', 0xa1, 1, b'v'],
            &[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x24, 0x45],
        ];
        for b in values {
            for cut in 0..b.len() {
                match decode(&b[..cut]) {
                    Err(Need(n)) => assert!(n > cut && n <= b.len(), "{b:02x?} cut at {cut}: Need({n})"),
                    other => panic!("{b:02x?} cut at {cut}: {other:?}"),
                }
                assert_eq!(decode_complete(&b[..cut]), Err(Bad::Overrun));
            }
        }
        // exactly what is needed next
        assert_eq!(decode(&[]), Err(Need(1)));
        assert_eq!(decode(&[0x70, 1]), Err(Need(5)));
        assert_eq!(decode(&[0xa1]), Err(Need(2)));
        assert_eq!(decode(&[0xa1, 5, b'a']), Err(Need(7)));
        assert_eq!(decode(&[0xd0, 0, 0]), Err(Need(5)), "the size first");
        assert_eq!(decode(&[0xd0, 0, 0, 0, 9, 0]), Err(Need(9)), "then the count");
        assert_eq!(decode(&[0xd0, 0, 0, 0, 9, 0, 0, 0, 1]), Err(Need(14)), "then the elements");
        assert_eq!(decode(&[0x00]), Err(Need(2)));
        assert_eq!(decode(&[0x00, 0x53]), Err(Need(3)));
        assert_eq!(decode(&[0x00, 0x53, 0x10]), Err(Need(4)));
        // a claim of 4 GiB is only a claim: nothing is allocated for it
        assert_eq!(decode(&[0xb0, 0xff, 0xff, 0xff, 0xff, 1, 2]), Err(Need(0xffff_ffff + 5)));
    }

    #[test]
    fn oversized_claims_and_wrong_constructors_are_bad() {
        // list32 claiming 2^32 - 1 elements in one octet of elements
        assert_eq!(bad(&[0xd0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40]), Bad::Count { code: 0xd0, count: u32::MAX });
        // known bad as soon as the count is in, before the elements are
        assert_eq!(bad(&[0xd0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff]), Bad::Count { code: 0xd0, count: u32::MAX });
        // list8: 200 elements in 4 octets
        assert_eq!(bad(&[0xc0, 5, 200, 0x40, 0x40, 0x40, 0x40]), Bad::Count { code: 0xc0, count: 200 });
        // sizes that cannot hold their count (and an array's constructor)
        assert_eq!(bad(&[0xc0, 0]), Bad::Size { code: 0xc0, size: 0 });
        assert_eq!(bad(&[0xd1, 0, 0, 0, 3]), Bad::Size { code: 0xd1, size: 3 });
        assert_eq!(bad(&[0xe0, 1, 0]), Bad::Size { code: 0xe0, size: 1 });
        // array8 of uint (4 octets each): 3 elements in 4 octets
        assert_eq!(bad(&[0xe0, 6, 3, 0x70, 0, 0, 0, 1]), Bad::Count { code: 0xe0, count: 3 });
        // an array whose element constructor is cut by the array's end
        assert_eq!(bad(&[0xe0, 2, 1, 0x00]), Bad::Overrun);
        assert_eq!(bad(&[0xc1, 3, 1, 0x41, 0x41]), Bad::OddMap(1));
        for code in [0x01, 0x46, 0x57, 0x62, 0x75, 0x85, 0x90, 0xa2, 0xb2, 0xc2, 0xe1, 0xff] {
            assert_eq!(bad(&[code, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), Bad::UnknownCode(code), "{code:#x}");
        }
        // descriptors other than ulong and symbol are reserved
        assert_eq!(bad(&[0x00, 0xa1, 1, b'x', 0x40]), Bad::Descriptor(0xa1));
        assert_eq!(bad(&[0x00, 0x00, 0x53, 1, 0x53, 2, 0x40]), Bad::Descriptor(0x00));
        // content: read when the value is
        assert_eq!(whole(&[0x56, 0x02]).value(), Err(Bad::Boolean(2)));
        assert_eq!(whole(&[0x73, 0x00, 0x11, 0x00, 0x00]).value(), Err(Bad::Char(0x110000)));
        assert_eq!(whole(&[0x73, 0x00, 0x00, 0xd8, 0x00]).value(), Err(Bad::Char(0xd800)));
        assert_eq!(whole(&[0xa1, 1, 0xff]).value(), Err(Bad::Text(0xa1)));
        assert_eq!(whole(&[0xa3, 2, 0xc3, 0xa9]).value(), Err(Bad::Text(0xa3)), "a symbol is ASCII");
        // an element running past its list's end, octets left after the last one
        let l = [0xc0, 3, 1, 0xa1, 5];
        let Value::List(c) = value(&l) else { panic!() };
        assert_eq!(c.iter().collect::<Vec<_>>(), [Err(Bad::Overrun)]);
        assert_eq!(validate(&whole(&l)), Err(Bad::Overrun));
        assert_eq!(validate(&whole(&[0xc0, 3, 1, 0x40, 0x40])), Err(Bad::Leftover(1)));
        assert_eq!(validate(&whole(&[0xc0, 4, 1, 0x56, 1, 0x40])), Err(Bad::Leftover(1)));
        assert_eq!(validate(&whole(&[0xc0, 3, 1, 0x56, 7])), Err(Bad::Boolean(7)));
    }

    #[test]
    fn nesting_is_capped() {
        // lists inside lists: `levels` list8 headers, the innermost list0
        let nested = |levels: usize| {
            let mut b = vec![0x45];
            for _ in 0..levels {
                let mut outer = vec![0xc0, b.len() as u8 + 1, 1];
                outer.extend(&b);
                b = outer;
            }
            b
        };
        assert_eq!(validate(&whole(&nested(MAX_NESTING as usize - 1))), Ok(()));
        assert_eq!(validate(&whole(&nested(MAX_NESTING as usize + 1))), Err(Bad::TooDeep));
        // a chain of descriptors: 0x00 0x53 n, ... then null
        let chain = |links: usize| {
            let mut b = Vec::new();
            for i in 0..links {
                b.extend([0x00, 0x53, i as u8]);
            }
            b.push(0x40);
            b
        };
        assert_eq!(validate(&whole(&chain(MAX_NESTING as usize))), Ok(()));
        assert_eq!(bad(&chain(MAX_NESTING as usize + 1)), Bad::TooDeep);
    }
}
