//! Percent-encoding, the one way granary writes and reads it: URLs' paths (a file's name in a
//! link, S3's CopySource), EZID's ANVL, and key segments made from a depositor's text.

/// `text` with every byte `keep` refuses written `%XX` (uppercase hex).
pub fn encode(text: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// RFC 3986's unreserved characters: letters, digits, `-`, `.`, `_`, `~`.
pub fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `%XX` sequences decoded (a `%` not followed by two hex digits stays as it is); bytes that are
/// not UTF-8 afterwards are replaced, never an error.
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A value S3 listed under `encoding-type=url` (a key, or a common prefix), read back: `+` is a
/// space and `%XX` a byte. S3 writes a space as `+` and a `+` as `%2B`; moto and LocalStack
/// write a space as `%20`, which reads back the same. Decoded bytes that are not UTF-8 are an
/// error, never replaced: a key read wrongly names another object.
pub fn decode_listed(text: &str) -> Result<String, std::str::Utf8Error> {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_what_is_not_kept_and_decodes_it_back() {
        let e = encode("a b/ü%", |b| unreserved(b) || b == b'/');
        assert_eq!(e, "a%20b/%C3%BC%25");
        assert_eq!(decode(&e), "a b/ü%");
        assert_eq!(decode("5%"), "5%");
        assert_eq!(decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn listed_keys_read_back_as_s3_and_the_emulators_write_them() {
        // S3's own form (a space as `+`, a `+` as `%2B`), and moto's and LocalStack's (`%20`).
        for (listed, key) in [
            ("a+b.txt", "a b.txt"),
            ("a%2Bb.txt", "a+b.txt"),
            ("100%25.csv", "100%.csv"),
            ("%ED%95%9C%EA%B8%80/x.txt", "한글/x.txt"),
            ("in/ctl%01x.json", "in/ctl\u{1}x.json"),
            ("in/a%20b%2Bc.txt", "in/a b+c.txt"),
            ("plain/key", "plain/key"),
        ] {
            assert_eq!(decode_listed(listed).unwrap(), key, "{listed}");
        }
        assert!(decode_listed("%FF").is_err(), "not UTF-8");
    }
}
