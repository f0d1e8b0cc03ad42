//! Database passwords kept out of every message: a store URL may carry one in three forms
//! (`postgres://user:PASSWORD@host`, `?password=PASSWORD`, and libpq's `key=value` form
//! `password=PASSWORD` or `password='PASS WORD'`), and each is shown as `***`.

/// What stands in for a password.
const MASK: &str = "***";

/// `text` with every database password in it replaced by `***`: the userinfo password of any
/// `scheme://user:password@host` URL and the value of any `password=` setting (URL query or
/// libpq `key=value` form, quoted or not). Text without one comes back unchanged.
pub fn mask_passwords(text: &str) -> String {
    mask_password_settings(&mask_userinfo(text))
}

/// Masks `user:PASSWORD@` after every `://`.
fn mask_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(scheme_end) = rest.find("://") {
        let after = scheme_end + 3;
        out.push_str(&rest[..after]);
        rest = &rest[after..];
        // The authority ends at the path, query, fragment, or the end of the word. A password
        // may hold `/`, `?` or `#` unescaped in a hand-written URL: the last `@` before
        // whitespace decides, so such a password is masked whole.
        let word_end = rest
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(rest.len());
        let word = &rest[..word_end];
        if let Some(at) = word.rfind('@') {
            let userinfo = &word[..at];
            match userinfo.split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(MASK);
                }
                None => out.push_str(userinfo),
            }
            rest = &rest[at..];
        }
    }
    out.push_str(rest);
    out
}

/// Masks the value of every `password=` (any case), as a URL query parameter (ends at `&`,
/// `#` or whitespace) or a libpq setting (ends at whitespace; a quoted value at its closing
/// quote, `\'` escaping one).
fn mask_password_settings(text: &str) -> String {
    const KEY: &str = "password=";
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find(KEY) {
        let key_start = search + found;
        let value_start = key_start + KEY.len();
        // Only a whole key: `xpassword=` is some other setting.
        let whole = key_start == 0 || {
            let before = lower.as_bytes()[key_start - 1];
            !before.is_ascii_alphanumeric() && before != b'_'
        };
        if !whole {
            search = value_start;
            continue;
        }
        let value = &text[value_start..];
        let len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut end = quoted.len();
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            1 + end.min(quoted.len())
        } else {
            value
                .find(|c: char| c.is_whitespace() || matches!(c, '&' | '#' | '"' | '`'))
                .unwrap_or(value.len())
        };
        out.push_str(&text[from..value_start]);
        out.push_str(MASK);
        from = value_start + len;
        search = from;
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::mask_passwords;

    #[test]
    fn every_form_of_password_is_masked() {
        let cases = [
            (
                "dsh recover --store postgres://dsh:SECRET@db:5432/dsh --session s",
                "dsh recover --store postgres://dsh:***@db:5432/dsh --session s",
            ),
            (
                "postgresql://u:p@ss/w?rd@h/db?sslmode=disable",
                "postgresql://u:***@h/db?sslmode=disable",
            ),
            (
                "postgres://dsh@h/db?password=SECRET&sslmode=off",
                "postgres://dsh@h/db?password=***&sslmode=off",
            ),
            (
                "host=h user=dsh password=SECRET dbname=dsh",
                "host=h user=dsh password=*** dbname=dsh",
            ),
            (
                "host=h PASSWORD='SE CR\\'ET' dbname=dsh",
                "host=h PASSWORD=*** dbname=dsh",
            ),
            ("postgres://dsh@h/db", "postgres://dsh@h/db"),
            ("no_password=x", "no_password=x"),
            ("password=", "password=***"),
            ("password='unclosed", "password=***"),
        ];
        for (input, shown) in cases {
            assert_eq!(mask_passwords(input), shown, "{input}");
        }
        assert!(!mask_passwords("a postgres://x:SECRET@h and password=SECRET").contains("SECRET"));
    }
}
