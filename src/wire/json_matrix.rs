//! Numeric matrices read straight from JSON text, for the two places where a request or an
//! answer is mostly numbers: the client's encoder answers (6,144 float32 for an (8, 1024)
//! window) and the emulator's numeric events (8,192 float64).
//!
//! Through serde_json each number costs 20-35 ns (its visitor or a `Value` per number, then a
//! cast), and skipping a matrix as a `RawValue` costs almost as much, because serde_json
//! decodes the digits of what it skips. Here each number is read straight to the wanted type:
//! the common shape by [`plain_decimal`] (~13 ns for a float32), the rest by fast-float2.
//! Callers cut the matrix out of the text ([`with_placeholders`]) and still read the rest of the
//! document with serde_json, which judges its validity; whatever these functions do not
//! recognise gives `None`, and the caller reads the original text with serde_json instead,
//! which is also what reports errors.
//!
//! The walking functions take `at` on the first byte of a value and are loose on purpose:
//! they find positions in valid JSON, and serde_json rejects what is not JSON afterwards.

use memchr::memchr2;

/// A matrix in row-major order: `rows` lists of `cols` numbers (one list when not `nested`).
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix<T> {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<T>,
    pub nested: bool,
}

/// The number types a matrix is read into.
pub trait Number: fast_float2::FastFloat + Copy {
    fn finite(self) -> bool;
    /// `mantissa / 10^scale` correctly rounded, when one exact division gets it; `None` when
    /// it needs fast-float2's general algorithm.
    fn from_decimal(mantissa: u64, scale: usize) -> Option<Self>;
    /// `-self` if `negative`, by flipping the sign bit: half of all embedding values are
    /// negative, in no order, and a branch on it mispredicted half the time.
    fn negated_if(self, negative: bool) -> Self;
}

/// Powers of ten exact in a float64 (5^22 < 2^53).
const POW10_F64: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
    1e20, 1e21, 1e22,
];

impl Number for f32 {
    fn finite(self) -> bool {
        self.is_finite()
    }

    fn negated_if(self, negative: bool) -> f32 {
        f32::from_bits(self.to_bits() ^ (u32::from(negative) << 31))
    }

    fn from_decimal(mantissa: u64, scale: usize) -> Option<f32> {
        // Through float64, as one exact division: an encoder's float32 written shortest has
        // 8-9 digits, too many for float32 to hold the mantissa exactly. Rounding to float64
        // and then to float32 is exact unless the float64 lands on a point halfway between two
        // float32s: those points are float64s, so rounding to the nearest float64 cannot cross
        // one, only reach it. Reaching one (and the float32 subnormal range, where halfway
        // points sit elsewhere) goes to fast-float2. (A float32-only division for short
        // mantissas was no faster: choosing between the two mispredicted.)
        let wide = f64::from_decimal(mantissa, scale)?;
        const DROPPED: u64 = (1 << 29) - 1; // float64 fraction bits below float32's 23
        let halfway = wide.to_bits() & DROPPED == 1 << 28;
        if halfway || (wide != 0.0 && wide < f64::from(f32::MIN_POSITIVE)) {
            return None;
        }
        Some(wide as f32)
    }
}

impl Number for f64 {
    fn finite(self) -> bool {
        self.is_finite()
    }

    fn negated_if(self, negative: bool) -> f64 {
        f64::from_bits(self.to_bits() ^ (u64::from(negative) << 63))
    }

    fn from_decimal(mantissa: u64, scale: usize) -> Option<f64> {
        (mantissa <= 1 << 53 && scale < POW10_F64.len()).then(|| mantissa as f64 / POW10_F64[scale])
    }
}

/// `text` with each `(start, end)` span (in order, not overlapping) replaced by `[]`.
pub fn with_placeholders(text: &[u8], spans: &[(usize, usize)]) -> Vec<u8> {
    let cut: usize = spans.iter().map(|(start, end)| end - start).sum();
    let mut out = Vec::with_capacity(text.len() - cut + 2 * spans.len());
    let mut from = 0;
    for &(start, end) in spans {
        out.extend_from_slice(&text[from..start]);
        out.extend_from_slice(b"[]");
        from = end;
    }
    out.extend_from_slice(&text[from..]);
    out
}

/// With `at` just past an object member's value, the position past the object's `}`; `None`
/// if a later member is named `unwanted` (serde keeps the last of two equal keys, and a
/// caller that stopped at the first must not guess which one counts) or the text is not an
/// object's remainder.
pub fn object_rest(text: &[u8], at: usize, unwanted: &[u8]) -> Option<usize> {
    let mut at = skip_ws(text, at);
    loop {
        match *text.get(at)? {
            b'}' => return Some(at + 1),
            b',' => {
                let name_start = skip_ws(text, at + 1);
                let name_end = string_end(text, name_start)?;
                if &text[name_start + 1..name_end - 1] == unwanted {
                    return None;
                }
                at = skip_ws(text, name_end);
                if text.get(at) != Some(&b':') {
                    return None;
                }
                at = skip_ws(text, value_end(text, skip_ws(text, at + 1))?);
            }
            _ => return None,
        }
    }
}

/// With `at` on an object's `{`, the position of the value of its first member named `key`.
/// The members before it are skipped, not decoded.
pub fn member_value(text: &[u8], at: usize, key: &[u8]) -> Option<usize> {
    if text.get(at) != Some(&b'{') {
        return None;
    }
    let mut at = skip_ws(text, at + 1);
    loop {
        let name_end = string_end(text, at)?;
        let name = &text[at + 1..name_end - 1];
        at = skip_ws(text, name_end);
        if text.get(at) != Some(&b':') {
            return None;
        }
        at = skip_ws(text, at + 1);
        if name == key {
            return Some(at);
        }
        at = skip_ws(text, value_end(text, at)?);
        match text.get(at) {
            Some(b',') => at = skip_ws(text, at + 1),
            _ => return None,
        }
    }
}

pub fn skip_ws(text: &[u8], mut at: usize) -> usize {
    while matches!(text.get(at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        at += 1;
    }
    at
}

/// With `at` on a string's opening quote, the position just past its closing quote.
pub fn string_end(text: &[u8], at: usize) -> Option<usize> {
    if text.get(at) != Some(&b'"') {
        return None;
    }
    let mut at = at + 1;
    loop {
        at += memchr2(b'"', b'\\', text.get(at..)?)?;
        if text[at] == b'"' {
            return Some(at + 1);
        }
        at += 2; // a backslash and the character it escapes
    }
}

/// The position just past the value starting at `at`. Containers are skipped by counting
/// brackets outside strings; scalars run to the next delimiter. Loose on purpose: serde_json
/// reads the same bytes afterwards and rejects what is not JSON.
pub fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match *text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = at;
            loop {
                match *text.get(at)? {
                    b'"' => {
                        at = string_end(text, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            let len = text[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
                .unwrap_or(text.len() - at);
            Some(at + len)
        }
    }
}

/// The matrix whose `[` is at `at`: either a flat list of numbers (`nested` false, one row) or
/// a non-empty list of equally long, non-empty lists of numbers. Returns it and the position
/// past its `]`. `capacity` is how many numbers to make room for at first.
pub fn parse_matrix<T: Number>(text: &[u8], at: usize, capacity: usize) -> Option<(Matrix<T>, usize)> {
    let mut m = Matrix { rows: 0, cols: 0, data: Vec::with_capacity(capacity), nested: false };
    let inner = skip_ws(text, at + 1);
    match *text.get(inner)? {
        b'[' => {
            m.nested = true;
            let mut at = inner;
            loop {
                let before = m.data.len();
                at = skip_ws(text, numbers(text, at + 1, &mut m.data)?);
                let width = m.data.len() - before;
                if m.rows == 0 {
                    m.cols = width;
                } else if width != m.cols {
                    return None;
                }
                m.rows += 1;
                match *text.get(at)? {
                    b',' => at = skip_ws(text, at + 1),
                    b']' => return Some((m, at + 1)),
                    _ => return None,
                }
                if text.get(at) != Some(&b'[') {
                    return None;
                }
            }
        }
        b']' => None, // empty: left to the serde path, which reports the shape
        _ => {
            let end = numbers(text, at + 1, &mut m.data)?;
            m.rows = 1;
            m.cols = m.data.len();
            Some((m, end))
        }
    }
}

/// Numbers separated by commas up to a `]`, from `at` (just past the `[`). Returns the position
/// past the `]`. An empty list is refused.
fn numbers<T: Number>(text: &[u8], at: usize, out: &mut Vec<T>) -> Option<usize> {
    // Float64 written shortest (16-17 digits, as Python and numpy write random data) is past
    // `plain_decimal`; after a few such numbers the rest of the list goes straight to
    // fast-float2, rather than being looked at twice (15 % slower on a request's 8,192).
    const MISSES_BEFORE_GIVING_UP: u32 = 8;
    let mut misses = 0;
    let mut at = skip_ws(text, at);
    loop {
        let token = text.get(at..)?;
        let plain = if misses < MISSES_BEFORE_GIVING_UP { plain_decimal::<T>(token) } else { None };
        let (value, len) = match plain {
            Some(read) => read,
            None => {
                misses += 1;
                let (value, len) = fast_float2::parse_partial::<T, _>(token).ok()?;
                if !is_json_number(&token[..len]) {
                    return None;
                }
                (value, len)
            }
        };
        if !value.finite() {
            return None;
        }
        out.push(value);
        at = skip_ws(text, at + len);
        match *text.get(at)? {
            b',' => at = skip_ws(text, at + 1),
            b']' => return Some(at + 1),
            _ => return None,
        }
    }
}

/// The number at the start of `text` when it has the shape of nearly every number in an
/// encoder's answer, `-?(0|[1-9][0-9]*)(\.[0-9]{1,15})?` with at most 19 digits in all and no
/// exponent, and [`Number::from_decimal`] can round it: the value and the token's length.
/// `None` for any other token, which fast-float2 then reads.
///
/// What costs here is not arithmetic but branches on the data, each mispredicted on a large
/// share of numbers: the sign (half of all embedding values are negative, in no order), a
/// whole part of `0` or not, and the fraction's length (5 to 10 digits for a float32 written
/// shortest; a loop over its digits mispredicts its exit on almost every number). So none of
/// them is a branch: the fraction is read from a 16-byte window without a loop, and the sign
/// is a bit flip. On 300 distinct encoder answers (768 float32 each, as the emulator writes
/// them) a matrix takes 9.8 µs, against 14.5 µs with fast-float2 reading every number.
/// (Parsing one answer over and over flatters branchy code, since the predictor learns its
/// 768 numbers: measured that way, the two were 6.5 and 7.5 µs.)
#[inline(always)]
pub(crate) fn plain_decimal<T: Number>(text: &[u8]) -> Option<(T, usize)> {
    let negative = text.first() == Some(&b'-');
    let start = usize::from(negative);
    let first = *text.get(start)?;
    if !first.is_ascii_digit() {
        return None;
    }
    // Wrapping arithmetic: a mantissa of more than 19 digits is refused below, whatever it became.
    let mut mantissa = u64::from(first - b'0');
    let mut at = start + 1;
    while let Some(digit) = text.get(at).filter(|b| b.is_ascii_digit()) {
        mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
        at += 1;
    }
    let whole_digits = at - start;
    if first == b'0' && whole_digits > 1 {
        return None; // `01`
    }
    let mut scale = 0;
    if text.get(at) == Some(&b'.') {
        // Near the end of the text there is no 16-byte window: fast-float2 reads those.
        let (fraction, digits) = fraction_digits(text.get(at + 1..at + 17)?)?;
        mantissa = mantissa.wrapping_mul(POW10_U64[digits]).wrapping_add(fraction);
        scale = digits;
        at += 1 + digits;
    }
    // `1.5.`, an exponent: not this shape (fast-float2 and the grammar check decide).
    if whole_digits + scale > 19 || matches!(text.get(at), Some(b'0'..=b'9' | b'.' | b'e' | b'E')) {
        return None;
    }
    Some((T::from_decimal(mantissa, scale)?.negated_if(negative), at))
}

const POW10_U64: [u64; 17] = [
    1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000,
    100_000_000_000, 1_000_000_000_000, 10_000_000_000_000, 100_000_000_000_000, 1_000_000_000_000_000,
    10_000_000_000_000_000,
];

/// The digits at the start of a 16-byte window: their value and how many (1 to 15), or `None`
/// when the window starts with no digit or is all digits (perhaps more follow). Branch-free.
#[inline(always)]
fn fraction_digits(window: &[u8]) -> Option<(u64, usize)> {
    let (low, high) = window.split_at(8);
    let low = u64::from_le_bytes(low.try_into().ok()?);
    let high = u64::from_le_bytes(high.try_into().ok()?);
    // Digits before the first non-digit in each word (the first character is the lowest byte).
    let leading = |word: u64| (non_digit_bytes(word).trailing_zeros() / 8) as usize;
    let in_low = leading(low);
    // Multiplied rather than chosen: a branch on it mispredicts for nearly half the numbers.
    let in_high = leading(high) * usize::from(in_low == 8);
    let digits = in_low + in_high;
    if digits == 0 || digits == 16 {
        return None;
    }
    let value = eight_digit_value(low, in_low) * POW10_U64[in_high] + eight_digit_value(high, in_high);
    Some((value, digits))
}

/// Top bit set in each byte of `word` that is not an ASCII digit, and possibly in the bytes
/// after it (a byte below '0' borrows and one above '9' carries into the next), never before.
#[inline(always)]
fn non_digit_bytes(word: u64) -> u64 {
    (word.wrapping_sub(0x3030_3030_3030_3030) | word.wrapping_add(0x4646_4646_4646_4646)) & 0x8080_8080_8080_8080
}

/// The value of the first `count` (0 to 8) bytes of `word`, which are ASCII digits, the first
/// the most significant; the bytes after them are ignored. The digits are shifted to the top of
/// the word (zeros before them) and combined in three steps: pairs, fours, the eight.
#[inline(always)]
fn eight_digit_value(word: u64, count: usize) -> u64 {
    // Bytes past `count` may have borrowed from each other; they are shifted out. Shifting in
    // two halves keeps each shift below 64 when `count` is 0.
    let shift = (8 - count) * 8;
    let digits = (word.wrapping_sub(0x3030_3030_3030_3030) << (shift / 2)) << (shift - shift / 2);
    let pairs = (digits.wrapping_mul(10) + (digits >> 8)) & 0x00FF_00FF_00FF_00FF;
    let fours = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    (fours.wrapping_mul(10_000) + (fours >> 32)) & 0xFFFF_FFFF
}

/// JSON's number grammar, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, over a token that
/// fast-float2 accepted. It also takes `+1`, `.5`, `01`, `1.`, `1.e5`, `inf` and `nan`, which
/// JSON does not; its own grammar (digits, then an optional fraction, then an optional exponent
/// with digits) leaves these few checks to make. Written to look at as few bytes as possible:
/// a per-byte pass here cost as much as the parse itself.
fn is_json_number(token: &[u8]) -> bool {
    // Branch-free: embeddings are half negative, and a mispredicted branch per number showed.
    let digits = &token[usize::from(token.first() == Some(&b'-'))..];
    let well_formed = match digits {
        // The shape of nearly every embedding value: one whole digit, then a fraction.
        [b'0'..=b'9', b'.', b'0'..=b'9', ..] => true,
        _ => {
            let whole = digits.iter().take_while(|b| b.is_ascii_digit()).count();
            let fraction_ok = match digits.get(whole) {
                Some(b'.') => digits.get(whole + 1).is_some_and(u8::is_ascii_digit),
                _ => true,
            };
            whole > 0 && (whole == 1 || digits[0] != b'0') && fraction_ok
        }
    };
    well_formed && token.last().is_some_and(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrices_of_both_layouts_and_types() {
        let text = b" [ [1, 2.5] , [-3e2,4] ] tail";
        let (m, end) = parse_matrix::<f64>(text, 1, 0).unwrap();
        assert_eq!(m, Matrix { rows: 2, cols: 2, data: vec![1.0, 2.5, -300.0, 4.0], nested: true });
        assert_eq!(&text[end..], b" tail");
        let (m, _) = parse_matrix::<f32>(b"[0.1,0.2]", 0, 0).unwrap();
        assert_eq!(m, Matrix { rows: 1, cols: 2, data: vec![0.1f32, 0.2], nested: false });
        // Correctly rounded straight to the type: the float64 text of a float32 gives it back.
        let (m, _) = parse_matrix::<f32>(b"[0.10000000149011612]", 0, 0).unwrap();
        assert_eq!(m.data[0].to_bits(), 0.1f32.to_bits());
        for bad in [&b"[]"[..], b"[[]]", b"[[1],[]]", b"[[1,2],[3]]", b"[1,[2]]", b"[[1],2]", b"[1e400]", b"[1"] {
            assert!(parse_matrix::<f64>(bad, 0, 0).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn placeholders_replace_spans() {
        assert_eq!(with_placeholders(b"a[1]b[2,3]c", &[(1, 4), (5, 10)]), b"a[]b[]c");
        assert_eq!(with_placeholders(b"abc", &[]), b"abc");
    }

    #[test]
    fn object_rest_skips_members_and_refuses_a_repeated_key() {
        let text = br#"{"a":1 , "b":{"x":"}"}, "c":[1,{"d":2}]} after"#;
        let end = object_rest(text, 6, b"contents").unwrap();
        assert_eq!(&text[end..], b" after");
        assert!(object_rest(br#"{"a":1,"contents":2}"#, 6, b"contents").is_none());
        assert!(object_rest(br#"{"a":1 2}"#, 6, b"z").is_none());
    }

    #[test]
    fn plain_decimals_take_the_common_shape_and_leave_the_rest() {
        assert_eq!(plain_decimal::<f32>(b"-0.080796875,0.1,0.2,0.3"), Some((-0.080796875f32, 12)));
        assert_eq!(plain_decimal::<f64>(b"12.5]                "), Some((12.5, 4)));
        assert_eq!(plain_decimal::<f64>(b"7"), Some((7.0, 1))); // no point, no window needed
        assert_eq!(plain_decimal::<f64>(b"0.123456789012345,0000"), Some((0.123456789012345, 17)));
        // No 16-byte window after the point: left to fast-float2.
        assert_eq!(plain_decimal::<f64>(b"0.5]"), None);
        assert_eq!(plain_decimal::<f32>(b"-0.0,                ").map(|(v, _)| v.to_bits()), Some((-0.0f32).to_bits()));
        // Not halfway between two float32s, but its nearest float64 is, so rounding through
        // float64 would pick the wrong float32 (found by the fuzz): fast-float2 reads it.
        assert_eq!(plain_decimal::<f32>(b"42.64565849304199,       "), None);
        let (m, _) = parse_matrix::<f32>(b"[42.64565849304199,0.25]            ", 0, 0).unwrap();
        assert_eq!(m.data[0].to_bits(), fast_float2::parse::<f32, _>("42.64565849304199").unwrap().to_bits());
        // Exactly halfway (2^24 + 1, between 2^24 and 2^24 + 2): the same.
        assert_eq!(plain_decimal::<f32>(b"16777217.0,             "), None);
        for other in ["1e5", "1.5E-3", "01", "1.", ".5", "-", "1.2.3", "0.12345678901234567890", "-x"] {
            assert_eq!(plain_decimal::<f64>(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn json_number_grammar() {
        for ok in ["0", "-0", "12", "1.5", "-0.25e-3", "1E+9", "3e7"] {
            assert!(is_json_number(ok.as_bytes()), "{ok}");
        }
        for bad in ["01", "-01", "1.", ".5", "1e", "1e+", "-", "+1", "inf", "1.e3", "--1"] {
            assert!(!is_json_number(bad.as_bytes()), "{bad}");
        }
    }
}
