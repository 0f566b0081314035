//! A lease's token: the reserve call's random prefix and the job's row id,
//! so an ack finds the row without an index.

/// `prefix` followed by `seq` in lower-case hex: a lease's token, the
/// call's random prefix and the job's row id (as `format!("{prefix}{seq:x}")`
/// writes it, without the formatting machinery, which was a visible share
/// of the writer's instructions per job here). The row id lets an ack
/// find the row and its lease without an index: [`token_seq`].
pub(super) fn numbered(prefix: &str, seq: i64) -> String {
    const DIGITS: usize = 2 * std::mem::size_of::<u64>();
    let mut hex = [0u8; DIGITS];
    let mut at = DIGITS;
    let mut rest = seq as u64;
    loop {
        at -= 1;
        hex[at] = b"0123456789abcdef"[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    let mut token = String::with_capacity(prefix.len() + DIGITS - at);
    token.push_str(prefix);
    token.extend(hex[at..].iter().map(|&b| char::from(b)));
    token
}

/// The row id a token [`numbered`] names; `None` for any other string (a
/// client's typo, a token of an older dq). Only a hint: the ack that uses
/// it checks the row's topic, id, state and token.
pub(super) fn token_seq(token: &str) -> Option<i64> {
    let (_, hex) = token.rsplit_once('.')?;
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16)
        .ok()
        .and_then(|v| i64::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_the_prefix_and_the_row_id_in_hex() {
        for n in [0, 1, 9, 10, 15, 16, 255, 4096, 0xdead_beef, i64::MAX] {
            let token = numbered("0123456789abcdef.", n);
            assert_eq!(token, format!("0123456789abcdef.{n:x}"));
            assert_eq!(token_seq(&token), Some(n));
        }
        assert_eq!(numbered("", 0), "0");
        // Anything else names no row.
        for other in [
            "",
            "abc",
            "0123456789abcdef.",
            "0123456789abcdef.+1",
            "0123456789abcdef.-1",
            "0123456789abcdef.x1",
            "0123456789abcdef.8000000000000000",
            "0123456789abcdef.10000000000000000",
            "0123456789abcdef.1 ",
        ] {
            assert_eq!(token_seq(other), None, "{other:?}");
        }
    }
}
