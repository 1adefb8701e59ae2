//! Where the limiter reads a request's fields: an `http::HeaderMap`, or the field lines of a
//! head parsed from bytes ([`FieldLines`], the server's lean HTTP/1.1 paths), through one
//! trait, so the rules that read them (route conditions, the client's address behind
//! trusted proxies, the client key) are written once for both.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Reads the values of a request's fields by name.
///
/// Implemented by `HeaderMap` and by [`FieldLines`]; both must answer alike for the
/// same head (the equivalence is tested over hostile heads in `tests/field_lines.rs`).
pub trait HeaderLookup {
    /// The value of every line named `name` (ASCII case ignored), in the order they came.
    fn values<'s>(&'s self, name: &'s HeaderName)
    -> impl DoubleEndedIterator<Item = &'s [u8]> + 's;
}

impl HeaderLookup for HeaderMap {
    fn values<'s>(
        &'s self,
        name: &'s HeaderName,
    ) -> impl DoubleEndedIterator<Item = &'s [u8]> + 's {
        self.get_all(name).into_iter().map(HeaderValue::as_bytes)
    }
}

/// A head's field lines as `httparse` parsed them, read without building a `HeaderMap`.
///
/// A line whose value a `HeaderMap` could not hold (a control byte other than tab) is not
/// seen, as it would not be in a map built from the same lines with the fallible
/// constructors. `httparse` admits no such value, so the check is only a guard, made on
/// the lines whose name matched (a name equal to a `HeaderName` is a valid one).
#[derive(Debug, Clone, Copy)]
pub struct FieldLines<'h, 'b>(pub &'h [httparse::Header<'b>]);

impl FieldLines<'_, '_> {
    /// The `HeaderMap` these lines make (what a custom [`KeyExtractor`](crate::KeyExtractor)
    /// reads): every line a map can hold, in order.
    pub fn to_header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.0.len());
        for field in self.0 {
            let name = HeaderName::from_bytes(field.name.as_bytes());
            let value = HeaderValue::from_bytes(field.value);
            if let (Ok(name), Ok(value)) = (name, value) {
                map.append(name, value);
            }
        }
        map
    }
}

impl HeaderLookup for FieldLines<'_, '_> {
    fn values<'s>(
        &'s self,
        name: &'s HeaderName,
    ) -> impl DoubleEndedIterator<Item = &'s [u8]> + 's {
        let name = name.as_str();
        self.0
            .iter()
            // Lengths first: they tell most names apart without a look at their bytes.
            .filter(move |f| f.name.len() == name.len() && f.name.eq_ignore_ascii_case(name))
            .filter(|f| {
                f.value
                    .iter()
                    .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
            })
            .map(|f| f.value)
    }
}

/// The value as text if `HeaderValue::to_str` would give it (tab and visible ASCII only).
pub(crate) fn visible_ascii(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}
