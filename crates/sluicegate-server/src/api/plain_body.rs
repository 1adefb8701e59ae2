//! The common `/v1/check` body read by hand: `{"policy": "…", "key": "…", "cost": N}` with
//! plain strings (no escape sequence), one policy name, a whole-number cost and optionally
//! `"reserve": true|false`, each field at most once, in any order. Such a body is what
//! every client library writes, and serde reading it (its field-name matching, the cost's
//! visitor, the borrowed strings) was ~1,800 instructions of the decision API's own work.
//!
//! Anything else returns `None` and goes to serde ([`super::check::parse_body`]), which
//! then accepts or refuses it with its own message. So this parser only ever accepts what
//! serde accepts, with the same result (tested against serde on generated bodies).

use std::borrow::Cow;

use super::types::{CheckBody, PolicyNames};

/// `body` parsed when it has the plain form above; `None` for anything else.
pub fn parse(body: &[u8]) -> Option<CheckBody<'_>> {
    // Checked whole, once: a byte that is not UTF-8 is an error wherever it is (in a string
    // serde refuses it, outside one it is no JSON), and then every string is a slice.
    let text = std::str::from_utf8(body).ok()?;
    let mut reader = Reader {
        text,
        body: text.as_bytes(),
        at: 0,
    };
    let mut fields = Fields::default();
    reader.byte(b'{')?;
    loop {
        let name = reader.string()?;
        reader.byte(b':')?;
        fields.set(name, &mut reader)?;
        if !reader.byte_or(b',', b'}')? {
            break;
        }
    }
    reader.skip_space();
    if reader.at != body.len() {
        return None;
    }
    Some(CheckBody {
        policy: PolicyNames::One(Cow::Borrowed(fields.policy?)),
        key: Cow::Borrowed(fields.key?),
        cost: fields.cost.unwrap_or(1),
        reserve: fields.reserve.unwrap_or(false),
    })
}

/// The fields seen so far; a second occurrence of one is left to serde (which refuses it).
#[derive(Default)]
struct Fields<'a> {
    policy: Option<&'a str>,
    key: Option<&'a str>,
    cost: Option<u64>,
    reserve: Option<bool>,
}

impl<'a> Fields<'a> {
    fn set(&mut self, name: &str, reader: &mut Reader<'a>) -> Option<()> {
        match name.as_bytes() {
            b"policy" if self.policy.is_none() => self.policy = Some(reader.string()?),
            b"key" if self.key.is_none() => self.key = Some(reader.string()?),
            b"cost" if self.cost.is_none() => self.cost = Some(reader.whole()?),
            b"reserve" if self.reserve.is_none() => self.reserve = Some(reader.boolean()?),
            _ => return None,
        }
        Some(())
    }
}

struct Reader<'a> {
    text: &'a str,
    /// `text`'s bytes.
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// JSON's whitespace: space, tab, line feed, carriage return.
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.body.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        self.skip_space();
        let b = *self.body.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn byte(&mut self, expected: u8) -> Option<()> {
        (self.next()? == expected).then_some(())
    }

    /// `true` on `more`, `false` on `end`, `None` on anything else.
    fn byte_or(&mut self, more: u8, end: u8) -> Option<bool> {
        match self.next()? {
            b if b == more => Some(true),
            b if b == end => Some(false),
            _ => None,
        }
    }

    /// A string without escapes or control characters (as serde borrows it).
    fn string(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let start = self.at;
        let rest = self.body.get(start..)?;
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at += len + 1;
        // Between two ASCII bytes: on character boundaries.
        self.text.get(start..start + len)
    }

    /// A JSON integer (`0`, or digits without a leading zero) that fits a `u64`; a
    /// fraction, an exponent, a sign or a larger number is serde's to judge.
    fn whole(&mut self) -> Option<u64> {
        self.skip_space();
        let rest = self.body.get(self.at..)?;
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let digits = &rest[..len];
        let followed = rest.get(len).copied();
        let plain_end = !matches!(followed, Some(b'.' | b'e' | b'E'));
        if len == 0 || (len > 1 && digits[0] == b'0') || !plain_end {
            return None;
        }
        let mut n: u64 = 0;
        for &d in digits {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.at += len;
        Some(n)
    }

    fn boolean(&mut self) -> Option<bool> {
        self.skip_space();
        let rest = self.body.get(self.at..)?;
        let (value, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.at += len;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What serde makes of `body` as a single request (the type's own deserialiser).
    fn serde(body: &[u8]) -> Option<(PolicyNames<'_>, String, u64, bool)> {
        let b: CheckBody = serde_json::from_slice(body).ok()?;
        Some((b.policy, b.key.into_owned(), b.cost, b.reserve))
    }

    fn same_as_serde(body: &[u8]) -> Result<(), TestCaseError> {
        if let Some(ours) = parse(body) {
            let ours = (ours.policy, ours.key.into_owned(), ours.cost, ours.reserve);
            prop_assert_eq!(Some(ours), serde(body), "{}", String::from_utf8_lossy(body));
        }
        Ok(())
    }

    /// Bodies near the plain form: fields in any order, repeated or missing, odd values,
    /// spaces, and then bytes cut, swapped or inserted.
    fn bodies() -> impl Strategy<Value = Vec<u8>> {
        let value = prop_oneof![
            "\"[a-z0-9_.-]{0,6}\"",
            "\"[a-z\\\\\"\u{0}-\u{1f}\u{e9}]{0,4}\"",
            "[0-9]{1,22}",
            "-?[0-9]{1,3}(\\.[0-9]{0,2})?([eE][+-]?[0-9])?",
            "true|false|null|\\[\\]|\\[\"a\"\\]|\\{\\}",
        ];
        let field = ("\"(policy|key|cost|reserve|other|pol\\\\u0069cy)\"", value)
            .prop_map(|(name, value)| format!("{name}:{value}"));
        let space = "[ \t\r\n]{0,2}";
        (
            prop::collection::vec((field, space), 0..6),
            space,
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 0..3),
        )
            .prop_map(|(fields, tail, edits)| {
                let inner: Vec<String> = fields
                    .into_iter()
                    .map(|(f, s)| format!("{s}{f}{s}"))
                    .collect();
                let mut body = format!("{{{}}}{tail}", inner.join(",")).into_bytes();
                for (at, byte, kind) in edits {
                    let i = at.index(body.len() + 1);
                    match kind {
                        0 if i < body.len() => {
                            body.remove(i);
                        }
                        1 if i < body.len() => body[i] = byte,
                        _ => body.insert(i.min(body.len()), byte),
                    }
                }
                body
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]
        #[test]
        fn accepts_only_what_serde_accepts_and_agrees(body in bodies()) {
            same_as_serde(&body)?;
        }

        #[test]
        fn any_bytes_agree(body in prop::collection::vec(any::<u8>(), 0..64)) {
            same_as_serde(&body)?;
        }
    }

    /// Policy, key, cost, reserve.
    type Expected = (&'static str, &'static str, u64, bool);

    #[test]
    fn the_common_bodies_are_read_by_hand() {
        let cases: [(&str, Expected); 5] = [
            (
                r#"{"policy":"bench","key":"user-1","cost":1}"#,
                ("bench", "user-1", 1, false),
            ),
            (r#"{"key":"k","policy":"p"}"#, ("p", "k", 1, false)),
            (
                " {\n \"policy\" : \"p\" , \"key\":\"é\",\"cost\":0,\"reserve\":true }\n",
                ("p", "é", 0, true),
            ),
            (
                r#"{"policy":"p","key":"k","cost":18446744073709551615}"#,
                ("p", "k", u64::MAX, false),
            ),
            (
                r#"{"policy":"p","key":"","reserve":false}"#,
                ("p", "", 1, false),
            ),
        ];
        for (body, (policy, key, cost, reserve)) in cases {
            let parsed = parse(body.as_bytes()).expect(body);
            assert_eq!(parsed.policy, PolicyNames::One(Cow::Borrowed(policy)));
            assert_eq!(
                (parsed.key.as_ref(), parsed.cost, parsed.reserve),
                (key, cost, reserve)
            );
            same_as_serde(body.as_bytes()).unwrap();
        }
    }

    #[test]
    fn everything_else_is_left_to_serde() {
        for body in [
            r#"{"policy":["a"],"key":"k"}"#,
            r#"{"policy":"p","key":"k","cost":1.0}"#,
            r#"{"policy":"p","key":"k","cost":01}"#,
            r#"{"policy":"p","key":"k","cost":-1}"#,
            r#"{"policy":"p","key":"k","cost":18446744073709551616}"#,
            r#"{"policy":"p","key":"k\"q"}"#,
            r#"{"policy":"p","key":"k","key":"k"}"#,
            r#"{"policy":"p","key":"k","extra":1}"#,
            r#"{"policy":"p"}"#,
            r#"{"policy":"p","key":"k"} x"#,
            r#"{"policy":"p","key":"k",}"#,
            r#"{}"#,
            r#"{"requests":[]}"#,
        ] {
            assert!(parse(body.as_bytes()).is_none(), "{body}");
        }
    }
}
