//! The command's environment: a core set of dsh's variables, the ones the user names, and
//! settings that keep output plain. Everything else stays out: a deny-list of secret-looking
//! names misses `DATABASE_URL=postgres://u:pw@…`, `PGPASSWORD`, `*_AUTH`, `SSH_AUTH_SOCK`.

use std::ffi::{OsStr, OsString};

/// Variables every command gets from dsh's environment (`LC_*` by prefix): what programs
/// need to find themselves, the user's home and locale, and nothing that grants access.
const CORE: &[&str] = &[
    "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
];

/// Plain output: no colours, no pager, no terminal tricks.
const SET: &[(&str, &str)] = &[
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// Whether `name` is in the core set.
fn is_core(name: &str) -> bool {
    CORE.contains(&name) || name.starts_with("LC_")
}

/// Whether the user named `name`: exactly, or by a prefix ending in `*` (`CARGO_*`).
fn is_named(name: &str, pass: &[String]) -> bool {
    pass.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The environment of a command: of `vars`, the core set and the names in `pass`; then the
/// plain-output settings and `extra` (the temp folder), which win over both.
pub(crate) fn scrubbed(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    pass: &[String],
    extra: &[(&str, &OsStr)],
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(name, _)| {
            // A name that is not UTF-8 cannot be core, and the user cannot have named it. The
            // store's URL never reaches a command, even when named.
            name.to_str().is_some_and(|name| {
                !dsh_core::STORE_ENV_VARS.contains(&name) && (is_core(name) || is_named(name, pass))
            })
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
    fn only_the_core_set_and_named_variables_pass() {
        let vars = [
            ("API_KEY", "k"),
            ("DATABASE_URL", "postgres://u:pw@db/x"),
            ("PGPASSWORD", "pw"),
            ("NPM_AUTH", "a"),
            ("SSH_AUTH_SOCK", "/run/agent"),
            ("LD_PRELOAD", "/evil.so"),
            ("PATH", "/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("KEEP_TOKEN", "ok"),
            ("CARGO_HOME", "/c"),
            ("TERM", "xterm-256color"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let env = scrubbed(
            vars,
            &["KEEP_TOKEN".to_string(), "CARGO_*".to_string()],
            &[("TMPDIR", OsStr::new("/t"))],
        );
        let names: Vec<String> = env
            .iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect();
        for gone in [
            "API_KEY",
            "DATABASE_URL",
            "PGPASSWORD",
            "NPM_AUTH",
            "SSH_AUTH_SOCK",
            "LD_PRELOAD",
        ] {
            assert!(!names.contains(&gone.to_string()), "{gone} leaked");
        }
        for kept in ["PATH", "LC_ALL", "KEEP_TOKEN", "CARGO_HOME"] {
            assert!(names.contains(&kept.to_string()), "{kept} missing");
        }
        let term: Vec<_> = env.iter().filter(|(n, _)| n == "TERM").collect();
        assert_eq!(term.len(), 1);
        assert_eq!(term[0].1, "dumb");
        assert!(env.iter().any(|(n, v)| n == "TMPDIR" && v == "/t"));
    }
}
