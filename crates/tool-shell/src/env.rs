//! The command's environment: dsh's, scrubbed of what looks secret, plus settings that keep
//! output plain.

use std::ffi::{OsStr, OsString};

/// Whether a variable's name looks secret: `*KEY*`, `*SECRET*`, `*TOKEN*`, `*PASSWORD*`
/// (any case), or a loader variable (`LD_*`, which can inject code into every program).
pub(crate) fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("LD_")
        || ["KEY", "SECRET", "TOKEN", "PASSWORD"]
            .iter()
            .any(|word| upper.contains(word))
}

/// Plain output: no colours, no pager, no terminal tricks.
const SET: &[(&str, &str)] = &[
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// The environment of a command: `vars` minus secret-looking names (unless in `pass`), plus
/// the plain-output settings and `extra` (the temp folder).
pub(crate) fn scrubbed(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    pass: &[String],
    extra: &[(&str, &OsStr)],
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            !dsh_core::STORE_ENV_VARS.contains(&&*name)
                && (pass.iter().any(|p| *p == name) || !looks_secret(&name))
        })
        .filter(|(name, _)| {
            !SET.iter().any(|(n, _)| OsStr::new(n) == name)
                && !extra.iter().any(|(n, _)| OsStr::new(n) == name)
        })
        .collect();
    out.extend(
        SET.iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v))),
    );
    out.extend(
        extra
            .iter()
            .map(|(n, v)| (OsString::from(n), v.to_os_string())),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_loader_variables_are_removed_unless_passed() {
        let vars = [
            ("API_KEY", "k"),
            ("github_token", "t"),
            ("DB_PASSWORD", "p"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("LD_PRELOAD", "/evil.so"),
            ("PATH", "/bin"),
            ("KEEP_TOKEN", "ok"),
            ("TERM", "xterm-256color"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let env = scrubbed(
            vars,
            &["KEEP_TOKEN".to_string()],
            &[("TMPDIR", OsStr::new("/t"))],
        );
        let names: Vec<String> = env
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        for gone in [
            "API_KEY",
            "github_token",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "LD_PRELOAD",
        ] {
            assert!(!names.contains(&gone.to_string()), "{gone} leaked");
        }
        assert!(names.contains(&"PATH".to_string()));
        assert!(names.contains(&"KEEP_TOKEN".to_string()));
        let term: Vec<_> = env.iter().filter(|(n, _)| n == "TERM").collect();
        assert_eq!(term.len(), 1);
        assert_eq!(term[0].1, "dumb");
        assert!(env.iter().any(|(n, v)| n == "TMPDIR" && v == "/t"));
    }
}
